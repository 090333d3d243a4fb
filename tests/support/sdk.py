"""What the official SDKs accept: an event is checked against the SDK's own types, so the mock (and
the relay) can only send what real clients parse."""

from __future__ import annotations

import typing
import warnings
from typing import Any

import openai.types.beta.realtime as beta_types
import openai.types.realtime as ga_types
from google.genai import types as genai_types
from pydantic import BaseModel, TypeAdapter


def _models_by_type(union: Any) -> dict[str, TypeAdapter[Any]]:
    """The SDK's server event union split by event type, so a failure names the right model."""
    members = typing.get_args(typing.get_args(union)[0])
    return {
        literal: TypeAdapter(member)
        for member in members
        for literal in typing.get_args(member.model_fields["type"].annotation)
    }


GA_EVENTS = _models_by_type(ga_types.RealtimeServerEvent)
BETA_EVENTS = _models_by_type(beta_types.RealtimeServerEvent)
# Fields real servers send that the SDK models do not declare (all seen in ../shared/recordings).
RECORDED_EXTRA_FIELDS = frozenset(
    {"obfuscation", "object", "id", "expires_at", "client_secret", "include", "image_tokens", "cached_tokens_details"}
)
FOUNDRY_ITEM_FIELDS = frozenset({"response_id", "created_at", "name"})


def undeclared_fields(value: Any, path: str = "") -> list[str]:
    """Paths of fields a parsed SDK model kept as extras, i.e. fields its schema lacks."""
    found: list[str] = []
    if isinstance(value, BaseModel):
        found += [f"{path}.{key}" for key in value.model_extra or {}]
        for name in type(value).model_fields:
            found += undeclared_fields(getattr(value, name), f"{path}.{name}")
    elif isinstance(value, list):
        for index, element in enumerate(value):
            found += undeclared_fields(element, f"{path}[{index}]")
    elif isinstance(value, dict):
        for key, element in value.items():
            found += undeclared_fields(element, f"{path}.{key}")
    return found


def check_event(event: dict[str, Any], *, beta: bool = False, foundry: bool = False) -> Any:
    """Parse with the OpenAI SDK's server event union; fail on fields the SDK and recordings do not know."""
    models = BETA_EVENTS if beta else GA_EVENTS
    assert event.get("type") in models, f"not a {'beta' if beta else 'GA'} server event: {event.get('type')}"
    parsed = models[event["type"]].validate_python(event)
    assert parsed.type == event["type"]
    allowed = RECORDED_EXTRA_FIELDS | (FOUNDRY_ITEM_FIELDS if foundry else frozenset())
    unknown = [p for p in undeclared_fields(parsed) if p.rsplit(".", 1)[-1] not in allowed]
    assert not unknown, f"{event['type']} has fields the SDK does not declare: {unknown}"
    return parsed


def server_message(message: dict[str, Any]) -> genai_types.LiveServerMessage:
    """A Gemini server message as google-genai parses it; fails on a field or enum value it does not know."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return genai_types.LiveServerMessage.model_validate(message)
