"""A recording's upstream as a socket of the relay under test (relay/offline/replay.py): the peer
the replay's `SessionLoop` writes to, which compares what it is sent with what the recorded relay
sent, and answers what the recording holds no answer to.

What the relay writes on it (`PeerTransport.write`/`send`, as on any socket of the harness's) is
read as the replay's dialect reads a send (relay/offline/sends.py): each comparable send waits,
keyed free of the ids the relay chose, for the recorded send it answers (`take`: the recorded
upstream's gate, relay/offline/replay_play.py, opens on it; `match` compares the two). A request
for a response no recorded frame answers (a new filler) is answered as a provider would, once the
round that sent it is over (`answers`); else the relay would ask again every 15 s. The recorded
upstream frames themselves are handed to the relay's reader by the replay's play, ids re-mapped
(`ids`) to those the relay under test chose.
"""

from __future__ import annotations

import difflib
import json
from typing import Any, Callable

from relay.offline.peers import PeerTransport
from relay.offline.replay_result import Divergence
from relay.offline.replaying import Key, ReplaySends, Requests, clip, json_object
from relay.session.transport import Frame


def diff_of(recorded: dict[str, Any], produced: dict[str, Any], sends: ReplaySends) -> str:
    def lines(event: dict[str, Any]) -> list[str]:
        shown = sends.compared(event)
        item = shown.get("item")
        if isinstance(item, dict) and isinstance(item.get("output"), str):
            # outputs are usually JSON text: show them structured so the diff points at the field
            try:
                item = {**item, "output": json.loads(item["output"])}
            except (ValueError, RecursionError):
                pass
            shown = {**shown, "item": item}
        return json.dumps(shown, indent=2, sort_keys=True, ensure_ascii=False).splitlines()

    return "\n".join(difflib.unified_diff(lines(recorded), lines(produced), "recorded", "replayed",
                                          lineterm="", n=2))


class IdMap:
    """Recorded relay ids -> the ids the relay under test chose for the same things."""

    def __init__(self, id_prefix: str | None) -> None:
        self.id_prefix = id_prefix
        self.mapping: dict[str, str] = {}

    def learn(self, recorded: dict[str, Any], produced: dict[str, Any]) -> None:
        for path in (("event_id",), ("item", "id")):
            old, new = _dig(recorded, path), _dig(produced, path)
            if isinstance(old, str) and isinstance(new, str) and old != new:
                self.mapping[old] = new

    def rewrite(self, event: dict[str, Any]) -> dict[str, Any]:
        if not self.mapping:
            return event
        return _replace_strings(event, self.mapping)


def _dig(data: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _replace_strings(value: Any, mapping: dict[str, str]) -> Any:
    if isinstance(value, str):
        return mapping.get(value, value)
    if isinstance(value, dict):
        return {k: _replace_strings(v, mapping) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace_strings(v, mapping) for v in value]
    return value


class RecordedUpstream(PeerTransport):
    """The recording's upstream, as the replay's relay sees it (see the module docstring).
    `produced_sends` reads the relay under test's sends, `recorded_sends` the recording's;
    `requests` knows which requests the recording answered; `t` is the replay's time (seconds into
    the recording); `timeline` gets a line per send; `progress` is told of every send."""

    def __init__(self, produced_sends: ReplaySends, recorded_sends: ReplaySends, requests: Requests, *,
                 id_prefix: str | None, t: Callable[[], float], timeline: list[str],
                 progress: Callable[[], None]) -> None:
        super().__init__(self._sent)
        self.produced_sends = produced_sends
        self.recorded_sends = recorded_sends
        self.requests = requests
        self.ids = IdMap(id_prefix)
        self._t = t
        self.timeline = timeline
        self._progress = progress
        self.produced: list[dict[str, Any]] = []   # every frame the relay sent upstream, in order
        self.unmatched: list[tuple[Key, dict[str, Any], float]] = []   # its sends, with when they were sent
        self.unanswered: list[tuple[Key, dict[str, Any]]] = []   # requests the recording holds no answer to
        self.divergences: list[Divergence] = []
        self.recorded_outputs: dict[str, str] = {}   # call id -> the output the recording sent

    def _sent(self, frame: Frame) -> None:
        """The relay wrote `frame` upstream."""
        event = json_object(frame)   # Gemini forwards a client's malformed frame as it is
        if event is None:
            return
        self.produced.append(event)
        sends = self.produced_sends
        for key, part in sends(event):
            t = round(self._t(), 6)
            self.unmatched.append((key, part, t))
            answer = sends.answer(key, part)
            if answer is not None:
                call_id, text, status = answer
                self.timeline.append(f"{t:9.3f}  send  {key[0]} {call_id} [{status}] {clip(text)}")
            else:
                self.timeline.append(f"{t:9.3f}  send  {sends.describe(key)}")
            if self.requests.unanswered(key, part):
                self.unanswered.append((key, part))
        self._progress()

    def answers(self) -> list[str | bytes]:
        """The provider's answers to the requests the recording holds none for, as a provider
        gives them (each said on the timeline)."""
        frames: list[str | bytes] = []
        while self.unanswered:
            key, event = self.unanswered.pop(0)
            self.timeline.append(f"{self._t():9.3f}  recv  the replay's answer to "
                                 f"{self.produced_sends.describe(key)}")
            frames += self.produced_sends.provider_answer(event, self.requests.sent)
        return frames

    def take(self, key: Key) -> dict[str, Any] | None:
        """The relay's first send not matched yet under `key` (now matched), or None."""
        for index, (candidate, event, _) in enumerate(self.unmatched):
            if candidate == key:
                del self.unmatched[index]
                return event
        return None

    def recorded(self, key: Key, recorded: dict[str, Any]) -> None:
        """A recorded send is reached: its output, if it is one, is what the call was answered."""
        answer = self.recorded_sends.answer(key, recorded)
        if answer is not None:
            self.recorded_outputs[answer[0]] = answer[1]

    def match(self, key: Key, recorded: dict[str, Any], produced: dict[str, Any] | None, t: float) -> None:
        """The recorded send `recorded` and the relay's counterpart (None: it never came), compared."""
        sends = self.recorded_sends
        what, call_id = sends.describe(key), sends.call_of(key)
        if produced is None:
            self.divergences.append(Divergence("missing", what, recorded, None, call_id=call_id, t=t))
            self.timeline.append(f"{self._t():9.3f}  MISSING {what}")
            return
        self.ids.learn(recorded, produced)
        if sends.compared(recorded) != sends.compared(produced):
            self.divergences.append(Divergence("changed", what, recorded, produced,
                                               diff_of(recorded, produced, sends), call_id=call_id, t=t))
            self.timeline.append(f"{self._t():9.3f}  CHANGED {what}")

    def extra(self, request: str) -> None:
        """What the relay sent that nothing recorded matched: each an `extra` divergence (a
        request, kind `request`, sent again with the same event id is one)."""
        sends = self.produced_sends
        seen: set[tuple[Key, str]] = set()
        for key, event, t in self.unmatched:
            if key[0] != request or (key, event.get("event_id")) not in seen:
                seen.add((key, event.get("event_id")))
                self.divergences.append(Divergence("extra", sends.describe(key), None, event,
                                                   call_id=sends.call_of(key), t=t))


__all__ = ["IdMap", "RecordedUpstream", "diff_of"]
