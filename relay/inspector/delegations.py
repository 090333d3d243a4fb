"""The inspector's reading of a delegating wire, GPT-Live's: each frame of a recording, as the Live
codec types it (relay/dialects/live.py, the Responses events nested in `response.event` by
relay/dialects/responses_stream.py), into the shared model (relay/inspector/model.py).

What a person sees of a GPT-Live session:

- the words on both sides, joined from the transcript deltas (the voice model's and the caller's);
- each **client delegation** (`session.delegation.created`, target `client`) as a call on the calls
  lane (its id the delegation's), answered by the appends that name it: the first append that went
  up is its output, each further one an answer beside it, and it is the relay's when the relay
  wrote the appends (their event ids carry the recording's `id_prefix`);
- each **append** (`session.thinking.append`, `session.commentary.append`,
  `session.instructions.append`) on the relay's lane, from when it went up to its
  acknowledgement (`session.*.appended`, matched by `client_event_id`), with the place on the
  session's audio timeline the server gave it (`start_ms`, `end_ms`): an append the server never
  acknowledged stays open;
- in **Responses delegation**, each backend response (the nested `response.created` to
  `response.completed`, `failed` or `incomplete`) on the responses lane, its function calls (read
  from the nested `response.output_item.done` only) as calls, their `function_call_output`s as
  outputs, and the batch's one `response.create` as a marker naming the calls it continues (the
  relay's own, or the client's it forwarded);
- errors as anomalies; the audio of both sides (`session.audio.format`, 24 kHz PCM by default).
"""

from __future__ import annotations

import json
from typing import Any

from relay.dialects import LIVE, Dialect
from relay.dialects import live as wire
from relay.inspector.audio import PCM16_24K, AudioFormat, elided, openai_format
from relay.inspector.building import ModelBuilding, as_dict
from relay.inspector.callbook import TrackedResponse
from relay.recording.format import (
    CLIENT_TO_RELAY,
    RELAY_TO_CLIENT,
    RELAY_TO_UPSTREAM,
    UPSTREAM_TO_RELAY,
    Frame,
)

_ENDS = {wire.BackendCompleted: "completed", wire.BackendFailed: "failed", wire.BackendIncomplete: "incomplete"}
_CHANNELS = {wire.InstructionsAppend: "instructions", wire.ThinkingAppend: "thinking",
             wire.CommentaryAppend: "commentary"}
_ACKS = {ack: _CHANNELS[append] for append, ack in wire.APPENDED.items()}
_CLIENT = wire.DELEGATION_TARGETS[0]
_DELEGATION_CALL = "delegation"
"""The name a client delegation's call is shown with (the wire gives it no tool name)."""


class DelegationParser:
    """Reads a GPT-Live session into `model`, frame by frame, keeping what only this wire needs:
    the words being transcribed, the appends awaiting their acknowledgement, the backend
    responses and their batches."""

    def __init__(self, model: ModelBuilding, dialect: Dialect = LIVE) -> None:
        self.model = model
        self.dialect = dialect
        self._format: AudioFormat = PCM16_24K
        self._open_words: dict[str, dict[str, Any] | None] = {"user": None, "assistant": None}
        self._appends: dict[str, dict[str, Any]] = {}        # an append's event id -> its event
        self._batch: list[str] = []                          # the calls of the last completed response
        self._client_creates = 0                             # client creates not yet forwarded

    # ---- feeding --------------------------------------------------------------------------------
    def feed(self, frame: Frame, event: dict[str, Any], binary: bool) -> None:
        slots = wire.audio_slots(event)
        if slots:
            self._audio(frame, slots)
            return
        index = self.model.store(frame, event, elided=elided(event, wire.audio_slots))
        typed = wire.event_of(event)
        direction = frame.direction
        if direction == UPSTREAM_TO_RELAY:
            self._upstream(frame.t, typed, index)
        elif direction in (RELAY_TO_UPSTREAM, CLIENT_TO_RELAY):
            self._sent(frame.t, typed, index, relay=direction == RELAY_TO_UPSTREAM)
        elif direction == RELAY_TO_CLIENT:
            self._shown(frame.t, typed, index)

    def _audio(self, frame: Frame, slots: list[Any]) -> None:
        model, direction = self.model, frame.direction
        model.audio_frames += 1
        for slot in slots:
            if slot.side == "input":
                if model.caller_direction is None and direction in (CLIENT_TO_RELAY, RELAY_TO_UPSTREAM):
                    model.caller_direction = direction
                if direction == model.caller_direction:
                    model.add_audio("caller", frame.t, self._format, slot.holder.get(slot.key), frame.audio_dropped)
            elif direction == UPSTREAM_TO_RELAY:
                model.add_audio("assistant", frame.t, self._format, slot.holder.get(slot.key), frame.audio_dropped)

    # ---- upstream -> relay ----------------------------------------------------------------------
    def _upstream(self, t: float, typed: Any, index: int) -> None:
        if isinstance(typed, (wire.SessionStarted, wire.SessionUpdated)):
            self._session_format(typed.session)
        elif isinstance(typed, wire.InputTranscriptDelta):
            self._words("user", t, typed.delta, index)
        elif isinstance(typed, wire.OutputTranscriptDelta):
            self._words("assistant", t, typed.delta, index)
        elif isinstance(typed, wire.DelegationCreated):
            self._delegated(t, typed, index)
        elif isinstance(typed, wire.ResponseEnvelope):
            self._backend(t, wire.backend_event(typed), index)
        elif type(typed) in _ACKS:
            self._acknowledged(t, typed, index)
        elif isinstance(typed, wire.Error):
            error = as_dict(typed.error)
            self.model.anomaly(t, f"the upstream refused something: {error.get('code') or error.get('type')}: "
                               f"{error.get('message')}", source="upstream", frames=[index])

    def _session_format(self, session: Any) -> None:
        described = as_dict(as_dict(session).get("audio")).get("format")
        found = openai_format({"audio": {"input": {"format": described}}}, "input")
        if found is not None:
            self._format = found

    def _words(self, role: str, t: float, text: Any, index: int) -> None:
        if not isinstance(text, str):
            return
        other = "assistant" if role == "user" else "user"
        self._open_words[other] = None   # the other side spoke: its words are a new turn next time
        words = self._open_words[role]
        if words is None:
            words = self.model.add_event(self.model.new_id("user" if role == "user" else "said"),
                                         "user_words" if role == "user" else "assistant_words", "words", t, "",
                                         role=role, text="")
            self._open_words[role] = words
        words["text"] += text
        words["label"] = words["text"]
        words["t1"] = round(t, 6)
        self.model.touch(words, index)

    def _delegated(self, t: float, typed: wire.DelegationCreated, index: int) -> None:
        delegation = typed.delegation
        self._open_words["user"] = None
        if delegation.target != _CLIENT:
            marker = self.model.add_event(self.model.new_id("delegation"), "responses", "delegation", t,
                                          f"delegated to the {delegation.target} backend", delegation_id=delegation.id,
                                          target=delegation.target, offset_ms=typed.offset_ms)
            marker["t1"] = marker["t0"]
            self.model.touch(marker, index)
            return
        call = self.model.track_call(t, delegation.id, _DELEGATION_CALL, None, index)
        if call is None:
            return
        call.event.update(delegation_target=delegation.target, offset_ms=typed.offset_ms,
                          label=f"delegation at {typed.offset_ms} ms")
        self.model.call_ready(t, delegation.id, "", index)

    def _acknowledged(self, t: float, typed: Any, index: int) -> None:
        append = self._appends.get(str(typed.client_event_id))
        if append is None:
            return
        append.update(t1=round(t, 6), start_ms=typed.start_ms, end_ms=typed.end_ms,
                      label=f"{append['label']} (placed {typed.start_ms}-{typed.end_ms} ms)")
        self.model.touch(append, index)

    # ---- the Responses backend ------------------------------------------------------------------
    def _backend(self, t: float, nested: Any, index: int) -> None:
        if isinstance(nested, (wire.BackendCreated, wire.BackendQueued, wire.BackendInProgress)):
            self._response_of(t, as_dict(nested.response).get("id"), index)
        elif isinstance(nested, wire.BackendItemDone):
            item = as_dict(nested.item)
            if item.get("type") == wire.FUNCTION_CALL:
                response_id = self._last_response_id()
                call = self.model.track_call(t, item.get("call_id"), item.get("name"), response_id, index)
                if call is not None:
                    self.model.call_ready(t, item.get("call_id"), item.get("arguments"), index)
        elif isinstance(nested, wire.BackendTextDelta):
            response = self.model.responses.get(str(self._last_response_id()))
            if response is not None and response.first_output is None:
                response.first_output = t
        elif type(nested) in _ENDS:
            snapshot = as_dict(nested.response)
            response = self._response_of(t, snapshot.get("id"), index)
            if response is None:
                return
            status = _ENDS[type(nested)]
            response.event.update(status=status, label=status, t1=round(t, 6))
            self.model.touch(response.event, index)
            self._batch = list(response.call_ids) if status == "completed" else []
            if status != "completed":
                reason = as_dict(snapshot.get("incomplete_details")).get("reason") or \
                    as_dict(snapshot.get("error")).get("code")
                self.model.anomaly(t, f"backend response {snapshot.get('id')} {status}"
                                   + (f" ({reason})" if reason else ""), source="upstream", frames=[index],
                                   related=response.event["id"], error=status == "failed")

    def _response_of(self, t: float, response_id: Any, index: int) -> TrackedResponse | None:
        if not isinstance(response_id, str):
            return None
        response = self.model.responses.get(response_id)
        if response is None:
            event = self.model.add_event(f"response:{response_id}", "responses", "response", t,
                                         "backend response (in progress)", response_id=response_id,
                                         status="in_progress", creator="backend", out_of_band=False,
                                         status_details=None)
            response = TrackedResponse(event)
            self.model.responses[response_id] = response
            self.model.outputs_answered_by(response_id)
        self.model.touch(response.event, index)
        return response

    def _last_response_id(self) -> str | None:
        open_ones = [rid for rid, r in self.model.responses.items() if r.event["status"] == "in_progress"]
        return open_ones[-1] if open_ones else None

    # ---- what went up ---------------------------------------------------------------------------
    def _ours(self, typed: Any) -> bool:
        prefix = self.model.id_prefix
        event_id = getattr(typed, "event_id", None)
        return bool(prefix) and isinstance(event_id, str) and event_id.startswith(f"{prefix}_e")

    def _sent(self, t: float, typed: Any, index: int, *, relay: bool) -> None:
        forwarded = relay and not self._ours(typed) and self.model.kind == "relay"
        if isinstance(typed, wire.ResponseCreate):
            self._create(t, index, relay=relay, forwarded=forwarded)
        elif isinstance(typed, wire.ResponseItemCreate):
            item = as_dict(typed.item)
            if item.get("type") == wire.FUNCTION_CALL_OUTPUT:
                self._output(t, item, index, relay=relay)
        elif type(typed) in _CHANNELS and not forwarded:
            self._append(t, typed, index, relay=relay)

    def _create(self, t: float, index: int, *, relay: bool, forwarded: bool) -> None:
        if not relay:
            self._client_creates += 1
            if self.model.kind == "relay":
                return   # its forward is the one that went up
        by_client = not relay or (forwarded and self._client_creates > 0)
        if forwarded and self._client_creates:
            self._client_creates -= 1
        calls = self._batch
        self._batch = []
        who = "the client's" if by_client else "the relay's"
        marker = self.model.relay_marker(t, "client_create" if by_client else "follow_up",
                                         f"{who} response.create for {len(calls)} call(s)", index)
        marker["call_ids"] = calls
        for call_id in calls:
            call = self.model.calls.get(call_id)
            if call is not None:
                call.event["follow_up"] = marker["id"]
                self.model.touch(call.event, index)

    def _output(self, t: float, item: dict[str, Any], index: int, *, relay: bool) -> None:
        call = self.model.calls.get(str(item.get("call_id")))
        if call is None:
            return
        if not relay and self.model.client_answered(call, index):
            return   # its forward (relay>upstream) is the answer that counted
        self.model.call_output(call, t, item.get("output"), "completed", None, index)

    def _append(self, t: float, typed: Any, index: int, *, relay: bool) -> None:
        channel = _CHANNELS[type(typed)]
        content = typed.content if isinstance(typed.content, str) else json.dumps(typed.content)
        delegation_id = typed.delegation_id if isinstance(typed.delegation_id, str) else None
        label = f"{channel} append: {content}"
        event = self.model.add_event(self.model.new_id("append"), "relay", "append", t, label, channel=channel,
                                     delegation_id=delegation_id, content=content, by="relay" if relay else "client",
                                     start_ms=None, end_ms=None)
        self.model.touch(event, index)
        if isinstance(typed.event_id, str):
            self._appends[typed.event_id] = event
        call = self.model.calls.get(str(delegation_id))
        if call is not None:
            call.event["owner"] = "relay" if relay else "client"
            self.model.call_output(call, t, content, "completed", None, index)
            call.event["answers"][-1]["channel"] = channel

    # ---- relay -> client ------------------------------------------------------------------------
    def _shown(self, t: float, typed: Any, index: int) -> None:
        """What the client saw: a call's or a delegation's frame toward it."""
        if isinstance(typed, wire.DelegationCreated):
            seen = [typed.delegation.id]
        elif isinstance(typed, wire.ResponseEnvelope):
            nested = wire.backend_event(typed)
            item = as_dict(nested.item) if isinstance(nested, wire.BackendItemDone) else {}
            seen = [item.get("call_id")] if item.get("type") == wire.FUNCTION_CALL else []
        else:
            seen = []
        for call_id in seen:
            call = self.model.calls.get(str(call_id))
            if call is not None and not call.seen_by_client:
                call.seen_by_client = True
                self.model.touch(call.event)
