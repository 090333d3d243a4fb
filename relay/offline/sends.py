"""Which reader a replay compares a recording's sends with (`relay.offline.replaying.ReplaySends`):
one per tool flow (`Dialect.flow`), made with the recording's dialect and the relay's id prefix.
The item-based flow's keys the OpenAI family's events free of the relay's ids; the turn-based
flow's numbers Gemini's answers per call; the delegating flow's, GPT-Live's, keys outputs by call,
appends by delegation and the batches' `response.create`s (relay/offline/delegation_sends.py).
A family of a new flow registers its reader here (`register_sends`)."""

from __future__ import annotations

from typing import Callable

from relay.dialects import OPENAI, Dialect, OpenAIFamily
from relay.dialects.base import ToolFlow
from relay.offline.delegation_sends import DelegationSends
from relay.offline.replaying import GeminiSends, OpenAISends, ReplaySends

SendsFactory = Callable[[Dialect, "str | None"], ReplaySends]


def _item_sends(dialect: Dialect, id_prefix: str | None) -> ReplaySends:
    return OpenAISends(dialect if isinstance(dialect, OpenAIFamily) else OPENAI, id_prefix)


def _turn_sends(dialect: Dialect, id_prefix: str | None) -> ReplaySends:
    return GeminiSends()


SENDS: dict[ToolFlow, SendsFactory] = {
    ToolFlow.ITEMS: _item_sends, ToolFlow.TURNS: _turn_sends, ToolFlow.DELEGATIONS: DelegationSends}


def register_sends(flow: ToolFlow, factory: SendsFactory) -> None:
    """Make `factory` the maker of `flow`'s replay readers."""
    SENDS[flow] = factory


def replay_sends(dialect: Dialect, id_prefix: str | None) -> ReplaySends:
    """What replay compares of the frames sent to `dialect`'s upstream, for a relay whose own
    event ids start with `id_prefix`: the reader of the dialect's flow."""
    return SENDS[dialect.flow](dialect, id_prefix)


__all__ = ["SENDS", "SendsFactory", "register_sends", "replay_sends"]
