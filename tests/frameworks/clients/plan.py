"""What every framework client shares (the standard library only: it runs in the framework's own
environment, without relay): the plan it is given and the JSON lines it prints.

A client is `python CLIENT.py PLAN_JSON`. The plan:

- `url`: where the framework connects (the relay's realtime URL, without a query);
- `token`: the relay's client token, given to the framework as its API key;
- `turns`: what the user types, in order: `{"text": ...}` at once, `{"text": ..., "after": S}`
  once the assistant has said something containing S;
- `audio_in`: the client pushes a second of audio through the framework and prints `audio_sent`;
  the test then plays the user's spoken turn on the mock (the mock does no VAD of its own);
- `until`: the client ends once it has heard each of these (in any assistant message), and
  `until_errors` once the framework reported an error containing each of these;
- `options`: what one framework's client takes besides (e.g. LiveKit's `api`: `agent_session` or
  `realtime_session`).

Each line printed is one JSON object with an `event`: `connected`, `sent` (a turn typed), `heard`
(an assistant message as the framework gives it to the application, with its `text`), `tool` (the
framework ran one of its own tools), `error` (what the framework reported), `audio_sent`,
`audio_out` (the bytes of assistant audio the framework handed on), `history` (the framework's own
conversation at the end: `items` of `role` and `text`), and last `done`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

# the few lines that point each framework at the relay are the documentation's own
# (docs/frameworks.md includes them): the clients import them from there
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "docs" / "examples" / "frameworks"))

AUDIO_RATE = 24000
"""PCM16 mono at 24 kHz: what the realtime API takes and gives."""


def tone(seconds: float = 1.0, rate: int = AUDIO_RATE) -> bytes:
    """A square wave, PCM16 mono: speech enough for a framework's own voice detection."""
    period = rate // 200
    samples = bytearray()
    for index in range(int(rate * seconds)):
        value = 8000 if (index % period) < period // 2 else -8000
        samples += value.to_bytes(2, "little", signed=True)
    return bytes(samples)


class Plan:
    """The plan of one client run, and the record of what the framework showed."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self.url: str = raw["url"]
        self.token: str = raw["token"]
        self.turns: list[dict[str, str]] = list(raw.get("turns", []))
        self.audio_in: bool = bool(raw.get("audio_in", False))
        self.until: list[str] = list(raw.get("until", []))
        self.until_errors: list[str] = list(raw.get("until_errors", []))
        self.errors: list[str] = []
        self.options: dict[str, Any] = dict(raw.get("options", {}))
        self.timeout: float = float(raw.get("timeout", 60))
        self.heard: list[str] = []
        self.audio_bytes = 0

    @classmethod
    def from_argv(cls) -> Plan:
        return cls(json.loads(sys.argv[1]))

    def first_turns(self) -> list[str]:
        """The turns typed at once (those without `after`), taken off the plan."""
        ready = [turn["text"] for turn in self.turns if "after" not in turn]
        self.turns = [turn for turn in self.turns if "after" in turn]
        return ready

    def hear(self, text: str) -> list[str]:
        """Record an assistant message; returns the turns it releases (taken off the plan)."""
        self.heard.append(text)
        emit("heard", text=text)
        ready = [turn["text"] for turn in self.turns if turn["after"].lower() in text.lower()]
        self.turns = [turn for turn in self.turns if turn["after"].lower() not in text.lower()]
        return ready

    def error(self, message: str) -> None:
        """Record an error the framework reported."""
        self.errors.append(message)
        emit("error", message=message)

    def finished(self) -> bool:
        """Everything in `until` was heard, and every error of `until_errors` reported."""
        return (all(any(wanted.lower() in text.lower() for text in self.heard) for wanted in self.until)
                and all(any(wanted in message for message in self.errors) for wanted in self.until_errors))


def emit(event: str, **fields: Any) -> None:
    """Print one JSON line and flush it (the test reads them as they come)."""
    print(json.dumps({"event": event, **fields}), flush=True)
