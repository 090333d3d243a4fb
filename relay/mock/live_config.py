"""What the GPT-Live mock accepts as a session's configuration, as strictly as the service: the
`session` of `session.start` (unknown fields refused, `model` required, the audio formats, the
three delegation modes, text-only `input`) and of `session.update` (only the delegation's settings
change; its type, and every other field, are immutable). A refusal is a `LiveRefusal` the session
turns into an `error` event; the session goes on.
"""

from __future__ import annotations

from typing import Any

from relay.dialects import live as wire
from relay.errors import RelayError
from relay.tools.render import json_copy

_SESSION = {"model", "audio", "client", "delegation", "input", "instructions", "safety_identifier", "store",
            "triggers"}
_AUDIO = {"format", "output"}
_FORMATS = {"audio/pcm": (16000, 24000), "audio/pcmu": (8000,), "audio/pcma": (8000,)}
_DELEGATION = {"client": {"type", "acknowledgement_delay_ms"},
               "responses": {"type", "acknowledgement_delay_ms", "responses"},
               "decisions": {"type", "acknowledgement_delay_ms", "decisions"}}
_RESPONSES = {"model", "instructions", "max_output_tokens", "parallel_tool_calls", "reasoning", "service_tier",
              "text", "tool_choice", "tools"}
_FUNCTION_TOOL = {"type", "name", "description", "parameters", "strict"}
_DECISIONS = {"model", "questions"}
_TRIGGER = {"type", "event_type", "decisions"}
_QUESTION_TYPES = ("choice", "predicate", "score")
_MESSAGE = {"type", "role", "content", "id", "status"}
_ROLES = ("developer", "user", "assistant")
MAX_INPUT_MESSAGES = 128
DEFAULT_RATE = 24000


class LiveRefusal(RelayError):
    """A client event the service refuses: an `error` with this code, message and param."""

    def __init__(self, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param


def _object(value: Any, param: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise LiveRefusal("invalid_type", f"Invalid type for '{param}': expected an object.", param)
    return value


def _known(value: dict[str, Any], allowed: set[str], param: str) -> None:
    for name in value:
        if name not in allowed:
            raise LiveRefusal("unknown_parameter", f"Unknown parameter: '{param}.{name}'.", f"{param}.{name}")


def start_config(session: Any) -> dict[str, Any]:
    """A `session.start`'s `session`, checked, with its defaults resolved (the audio format, the
    voice, the client delegation): what `session.started` reports."""
    config = _object(session, "session")
    _known(config, _SESSION, "session")
    if not isinstance(config.get("model"), str) or not config["model"]:
        raise LiveRefusal("missing_required_parameter", "Missing required parameter: 'session.model'.",
                          "session.model")
    for name in ("instructions", "safety_identifier"):
        if config.get(name) is not None and not isinstance(config[name], str):
            raise LiveRefusal("invalid_type", f"Invalid type for 'session.{name}': expected a string.", f"session.{name}")
    if config.get("store") is not None and not isinstance(config["store"], bool):
        raise LiveRefusal("invalid_type", "Invalid type for 'session.store': expected a boolean.", "session.store")
    resolved = json_copy(config)
    resolved["audio"] = _audio(config.get("audio"))
    resolved["delegation"] = delegation(config.get("delegation"), "session.delegation")
    resolved["input"] = _input(config.get("input"))
    if config.get("triggers") is not None:
        resolved["triggers"] = triggers(config["triggers"], "session.triggers")
    for absent in ("client", "store", "triggers", "safety_identifier", "instructions"):
        if resolved.get(absent) is None:
            resolved.pop(absent, None)
    return resolved


def _audio(value: Any) -> dict[str, Any]:
    audio = _object(value if value is not None else {}, "session.audio")
    _known(audio, _AUDIO, "session.audio")
    output = _object(audio.get("output") or {}, "session.audio.output")
    _known(output, {"voice"}, "session.audio.output")
    fmt = _object(audio.get("format") or {"type": "audio/pcm", "rate": DEFAULT_RATE}, "session.audio.format")
    _known(fmt, {"type", "rate"}, "session.audio.format")
    rates = _FORMATS.get(fmt.get("type"))   # type: ignore[arg-type]
    if rates is None:
        raise LiveRefusal("invalid_value", f"Invalid value: {fmt.get('type')!r}. Supported values are: "
                          + ", ".join(f"'{name}'" for name in _FORMATS) + ".", "session.audio.format.type")
    rate = fmt.get("rate", rates[-1])
    if rate not in rates:
        raise LiveRefusal("invalid_value", f"Invalid value: {rate!r} is not a supported rate for {fmt['type']}.",
                          "session.audio.format.rate")
    return {"output": {"voice": output.get("voice", "marin")}, "format": {"type": fmt["type"], "rate": rate}}


def delegation(value: Any, param: str, *, update: bool = False) -> dict[str, Any]:
    """A delegation config (omitted or null: client delegation); `update`: a `session.update`'s,
    whose settings may be sparse."""
    if value is None:
        return {"type": "client"}
    config = _object(value, param)
    kind = config.get("type")
    if kind not in _DELEGATION:
        raise LiveRefusal("invalid_value", f"Invalid value: {kind!r}. Supported values are: 'client', 'responses', "
                          "'decisions'.", f"{param}.type")
    _known(config, _DELEGATION[kind], param)
    delay = config.get("acknowledgement_delay_ms")
    if delay is not None and (not isinstance(delay, int) or isinstance(delay, bool) or delay < 0):
        raise LiveRefusal("invalid_value", "acknowledgement_delay_ms must be a non-negative integer.",
                          f"{param}.acknowledgement_delay_ms")
    if kind == "responses":
        settings = _backend(config.get("responses"), f"{param}.responses", _RESPONSES, update)
        if settings is not None:
            _tools(settings, f"{param}.responses")
    elif kind == "decisions":
        settings = _backend(config.get("decisions"), f"{param}.decisions", _DECISIONS, update)
        if settings is not None:
            _questions(settings, f"{param}.decisions", update)
    return json_copy(config)


def _backend(value: Any, param: str, allowed: set[str], update: bool) -> dict[str, Any] | None:
    """A backend's settings (None: an update that leaves them as they are); `model` required
    when the session starts."""
    if value is None and update:
        return None
    settings = _object(value, param)
    _known(settings, allowed, param)
    if not update and not isinstance(settings.get("model"), str):
        raise LiveRefusal("missing_required_parameter", f"Missing required parameter: '{param}.model'.",
                          f"{param}.model")
    return settings


def _tools(settings: dict[str, Any], param: str) -> None:
    tools = settings.get("tools") or []
    if not isinstance(tools, list):
        raise LiveRefusal("invalid_type", f"Invalid type for '{param}.tools': expected an array.", f"{param}.tools")
    for index, tool in enumerate(tools):
        where = f"{param}.tools[{index}]"
        tool = _object(tool, where)
        if tool.get("type") == "function":
            _known(tool, _FUNCTION_TOOL, where)
            if not isinstance(tool.get("name"), str) or not tool["name"]:
                raise LiveRefusal("missing_required_parameter", f"Missing required parameter: '{where}.name'.",
                                  f"{where}.name")
        elif tool.get("type") == "web_search":
            _known(tool, {"type"}, where)
        else:
            raise LiveRefusal("invalid_value", f"Invalid value: {tool.get('type')!r}. Supported values are: "
                              "'function', 'web_search'.", f"{where}.type")


def _questions(settings: dict[str, Any], param: str, update: bool) -> None:
    questions = settings.get("questions", [] if update else None)
    if not isinstance(questions, list):
        raise LiveRefusal("invalid_type", f"Invalid type for '{param}.questions': expected an array.",
                          f"{param}.questions")
    for index, question in enumerate(questions):
        if _object(question, f"{param}.questions[{index}]").get("type") not in _QUESTION_TYPES:
            raise LiveRefusal("invalid_value", "A question's type is one of 'choice', 'predicate', 'score'.",
                              f"{param}.questions[{index}].type")


def triggers(value: Any, param: str) -> list[Any]:
    """A session's Decisions triggers: each `{"type": "decisions", "event_type": <a transcript
    delta's type>, "decisions": {"questions": [...]}}`, at most one per event type."""
    if not isinstance(value, list):
        raise LiveRefusal("invalid_type", f"Invalid type for '{param}': expected an array.", param)
    seen: set[str] = set()
    for index, trigger in enumerate(value):
        where = f"{param}[{index}]"
        _known(_object(trigger, where), _TRIGGER, where)
        if trigger.get("type") != "decisions":
            raise LiveRefusal("invalid_value", "A trigger's type is 'decisions'.", f"{where}.type")
        kind = trigger.get("event_type")
        if kind not in wire.TRIGGER_EVENTS or kind in seen:
            raise LiveRefusal("invalid_value", "A trigger's event_type is a transcript delta's type, at most one "
                              "trigger per type.", f"{where}.event_type")
        seen.add(kind)
        settings = _object(trigger.get("decisions"), f"{where}.decisions")
        _known(settings, {"questions"}, f"{where}.decisions")
        _questions(settings, f"{where}.decisions", False)
    return json_copy(value)


def _input(value: Any) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_INPUT_MESSAGES:
        raise LiveRefusal("invalid_value", f"session.input takes at most {MAX_INPUT_MESSAGES} messages.",
                          "session.input")
    for index, message in enumerate(value):
        where = f"session.input[{index}]"
        _known(_object(message, where), _MESSAGE, where)
        if message.get("role") not in _ROLES:
            raise LiveRefusal("invalid_value", "An input message's role is 'developer', 'user' or 'assistant'.",
                              f"{where}.role")
        content = message.get("content")
        if (not isinstance(content, list) or len(content) != 1 or not isinstance(content[0], dict)
                or not isinstance(content[0].get("text"), str)):
            raise LiveRefusal("invalid_value", "An input message holds one text part.", f"{where}.content")
    return json_copy(value)


def updated_config(current: dict[str, Any], session: Any) -> dict[str, Any]:
    """The configuration after a `session.update`: only the delegation's settings change (sparse:
    omitted keys keep their values); its type, and any other field, cannot."""
    update = _object(session, "session")
    for name in update:
        if name == "triggers":
            continue
        if name != "delegation":
            raise LiveRefusal("immutable_field_update", f"session.{name} cannot change after session startup.",
                              f"session.{name}")
    changed = json_copy(current)
    if "triggers" in update:
        changed["triggers"] = triggers(update["triggers"], "session.triggers")
    if "delegation" not in update:
        return changed
    wanted = update["delegation"]
    if wanted is None or not isinstance(wanted, dict) or wanted.get("type") != current["delegation"]["type"]:
        raise LiveRefusal("immutable_field_update", "The delegation type cannot change after session startup.",
                          "session.delegation.type")
    checked = delegation(wanted, "session.delegation", update=True)
    kind = checked["type"]
    merged = changed["delegation"]
    for name, value in checked.items():
        if name == kind and isinstance(value, dict):
            merged[kind] = {**merged.get(kind, {}), **value}
        else:
            merged[name] = value
    return changed
