"""The sans-I/O engine for GPT-Live sessions (`/v1/live/sessions`): tool work handed over as
delegations, with the same entry points, call book, outcomes, records and guarantees as the
Realtime and Gemini engines.

    engine.receive_upstream(frame, now)  -> actions
    engine.receive_client(frame, now)    -> actions
    engine.handler_finished(call_id, outcome, now) -> actions
    engine.tick(now)                     -> actions      (timeouts)

GPT-Live's model makes no function calls of its own: it delegates. What the relay does depends on
the session's delegation mode (from `session.start`, or `session.started` on a sideband):

- **Responses delegation**: the relay adds its tools to `session.delegation.responses.tools`
  (and to a `session.update` that sets them), reads each function call from the nested
  `response.output_item.done` of a `response.event` envelope, runs the relay's once, and answers
  each with one `response.item.create` (a `function_call_output` for its `call_id`) once the
  backend response completed; one `response.create` continues the batch when every output of it
  is in (`batches.Batches`: the relay's own; for a batch with calls of the client's too, the
  client's create, held until then, as on Realtime). Calls of tools the client declared are the client's; a call of a tool nobody declared is
  answered with an error, so that its batch can go on.
- **Client delegation** (the default): with a delegate registered (`relay.tools.delegate`), each
  `session.delegation.created` is a relay call of the delegate, given a `Delegation` (its id, its
  offset, the transcript so far on both sides); its answer goes up as appends
  (`appends.answer_appends`: the result silent, the message spoken, a failure or a timeout spoken
  honestly; each at most 500 tokens) naming the delegation, once. Without a delegate the
  delegations are the client's.
- **Decisions delegation** has no function calls to answer: its config is a Decision model and
  its questions (no tools, and the strict config refuses any), and a `decision.event` carries the
  Decision API's answers, which are the client's to act on; `function_call` items exist only as
  inputs the client appends (`decision.item.create`). So the relay adds nothing there (one line
  says its tools are not offered), runs nothing and owes nothing; the `decision.*` events pass
  both ways, and a decision naming a delegation the relay never saw, or not of its shape, is told.

Proxied, the client sees none of the relay's: its tools are left out of the session it is shown,
the nested events of its calls are dropped, a delegation its delegate answers is not shown, and a
client's output or append for one of them is refused (`--expose-tool-events` shows them). A
barge-in cancels nothing in GPT-Live; the caller speaking again while a delegate runs applies the
delegate's `Interruption` (`cancel`: the late result is dropped and the delegation answered
silently; `finish_silently`: kept as silent context; `finish_and_speak`: spoken).

The wire is read and written through the Live codec only (relay/dialects/live.py): events are
its typed events, and what the engine sends are its commands. Audio passes unparsed.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Callable, Iterable

import msgspec

from relay.dialects import live
from relay.dialects.live import LIVE, LiveDialect
from relay.engine.actions import SendClient, SendUpstream
from relay.engine.appends import Channel, answer_appends, split_text
from relay.engine.backend_calls import DELEGATED, DROP, SAME, UNCLAIMED, ResponsesDelegation
from relay.engine.client_asks import ClientAsks
from relay.engine.delegation_records import LiveRecords
from relay.engine.delegated_tools import CLIENT, DECISIONS, RESPONSES, DelegatedTools, delegation_type
from relay.engine.calls import CallEntry, CallOutcome, CallState
from relay.engine.context import Source
from relay.engine.reseed import seeded_session
from relay.engine.transcript import Transcript
from relay.tools.render import RenderedOutput
from relay.tools.spec import ToolSpec

BARGE_IN_GRACE_MS = 1000
"""Caller's words this long after a delegation's offset are new speech, not the tail of the
sentence that asked (the delegation can be created before that sentence is transcribed)."""


class LiveEngine(DelegatedTools):
    """One GPT-Live session's state and rules."""

    default_dialect: LiveDialect = LIVE
    dialect: LiveDialect

    def __init__(self, *args: Any, **options: Any) -> None:
        """As `SessionEngine`: tools (and a delegate among them), and the dialect, config,
        session_id and id_prefix options."""
        super().__init__(*args, **options)
        if not isinstance(self.dialect, LiveDialect):
            raise TypeError(f"LiveEngine speaks GPT-Live, not {self.dialect.name}")
        self.forwards_upstream = live.audio_peek(upstream=True)   # type: ignore[method-assign]
        self.forwards_client = live.audio_peek(upstream=False)    # type: ignore[method-assign]
        self.mode: str | None = None                  # the session's delegation target, once known
        self.transcript = Transcript()
        self._client_delegations: set[str] = set()    # delegations left to the client
        self._decisions: dict[str, bool] = {}         # a Decisions delegation -> its decision came
        self._fillers: dict[str, tuple[float, str]] = {}   # a running delegate's filler: (when, text)
        self._told: set[tuple[str, str]] = set()      # (side, type) of unknown events already told
        self._declared = False                        # the relay's tools are in the session
        self._refused = False                         # the client's session.start was refused
        self._started: dict[str, Any] | None = None   # the session as its session.start went up

    # ==== plumbing ======================================================================
    def _to_client(self, frame: str | bytes) -> None:
        if self.config.has_client:
            self.ctx.out.append(SendClient(frame))

    def _unknown(self, frame: str | bytes, side: str) -> str | None:
        """A frame the codec does not know: its `type` when it is a JSON object with one (told
        once per type), None when it is malformed."""
        try:
            data = json.loads(frame)
        except (ValueError, RecursionError):
            return None
        kind = data.get("type") if isinstance(data, dict) else None
        if not isinstance(kind, str):
            return None
        if (side, kind) not in self._told:
            self._told.add((side, kind))
            self.ctx.anomaly(f"{side} event of an unknown type or shape {kind!r}: passed on as it came", kind)
        return kind

    def _after_input(self) -> None:
        self._continue_waiting()   # a batch another delegation's work held goes once that is over
        self.ctx.forget_old()

    # ==== upstream ======================================================================
    def _upstream_frame(self, frame: str | bytes) -> None:
        if self.forwards_upstream(frame):   # audio (the edges' express lane forwards it before)
            self._to_client(frame)
            return
        event = live.decode(frame)
        if isinstance(event, live.Unknown):
            if self._unknown(frame, "upstream") is not None:
                self._to_client(frame)
            else:
                self.ctx.anomaly("upstream frame is not a JSON event: dropped", None)
            return
        handler = self._UPSTREAM.get(type(event))
        result = SAME if handler is None else handler(self, event)
        if result is SAME:
            self._to_client(frame)
        elif result is not DROP:
            self._to_client(live.encode(result))

    def _on_session(self, event: live.SessionStarted | live.SessionUpdated) -> Any:
        session = event.session if isinstance(event.session, dict) else {}
        mode = delegation_type(session)
        if mode is not None or isinstance(event, live.SessionStarted):
            self.mode = mode or CLIENT
        if isinstance(event, live.SessionStarted) and self._new_one_starting:
            self._new_one_starting = False
            self._continue_carried()   # the new session is up: the dropped one's batches go on in it
        self._session_tools(event, session)
        shown = self._without_relay_tools(event)
        answered = event.client_event_id
        if isinstance(answered, str) and answered.startswith(self.ctx.id_prefix + "_"):
            # the answer to the relay's own `session.start` (a session carried on in a new one):
            # the client sent no command of that id, and is not shown one
            shown = copy.copy(event if shown is SAME else shown)
            shown.client_event_id = None
        return shown

    def _on_closed(self, event: live.SessionClosed) -> Any:
        """The session is over, as the provider says before it closes the socket: for good (a
        new connection would not carry it on), and an edge that sees the socket close next knows
        the call ended (a hangup, the duration limit...) and is not to come back for it."""
        self.ended_by_provider = event.reason if isinstance(event.reason, str) and event.reason else "closed"
        return self._without_relay_tools(event)

    def _on_transcript(self, event: live.InputTranscriptDelta | live.OutputTranscriptDelta) -> Any:
        if not isinstance(event.delta, str):
            return SAME
        user = isinstance(event, live.InputTranscriptDelta)
        self.transcript.add("user" if user else "assistant", event.delta)
        if user and isinstance(event.start_ms, int):
            self._caller_spoke(event.start_ms)
        return SAME

    def _caller_spoke(self, at_ms: int) -> None:
        """The caller's words at `at_ms`: a barge-in for each running delegate that was handed its
        work well before (the delegate's interruption policy applies)."""
        for call_id, offset in list(self._offsets.items()):
            entry = self.ledger.get(call_id)
            if entry is None or call_id not in self.running or entry.interrupted:
                continue
            if at_ms >= offset + BARGE_IN_GRACE_MS:
                self._interrupt(entry, "the caller spoke again")

    def _on_delegation(self, event: live.DelegationCreated) -> Any:
        delegation = event.delegation
        if delegation.target == RESPONSES:
            self._delegated_to_backend(delegation.id, delegation.response_id)
            return SAME
        if delegation.target == DECISIONS:
            self._decisions.setdefault(delegation.id, False)   # the Decision API answers it, to the client
            return SAME
        if delegation.target != CLIENT:
            self.ctx.anomaly(f"delegation {delegation.id} has an unknown target {delegation.target!r}: passed on",
                             live.wire_type(event))
            return SAME
        if self.delegate is None:
            self._client_delegations.add(delegation.id)
            return SAME
        if delegation.id in self.ledger:
            self.ctx.anomaly(f"delegation {delegation.id} created again; answered once", "delegation")
            return DROP if self._hiding else SAME
        offset = event.offset_ms if isinstance(event.offset_ms, int) else None
        self._take_delegation(delegation.id, offset, self.transcript.turns())
        return DROP if self._hiding else SAME

    def _on_decision(self, event: live.DecisionEvent) -> Any:
        """A Decision evaluation, passed on: its answers are the client's to act on (it makes no
        call, so nothing in it is the relay's to run or answer). One that carries no
        `decision.completed` of its shape, or names a delegation the relay never saw, is told."""
        kind = live.wire_type(event)
        if isinstance(live.decision_of(event), live.Unknown):
            nested = event.event.get("type") if isinstance(event.event, dict) else None
            self.ctx.anomaly(f"{kind} carries no decision of the known shape (nested {nested!r}): passed on", kind)
        delegation_id = event.delegation_id
        if isinstance(delegation_id, str):
            if delegation_id not in self._decisions:
                self.ctx.anomaly(f"{kind} names delegation {delegation_id}, which the relay never saw: passed on", kind)
            self._decisions[delegation_id] = True
        elif delegation_id not in (None, msgspec.UNSET):
            self.ctx.anomaly(f"{kind} has a delegation_id that is not a string: passed on", kind)
        return SAME

    def _on_error(self, event: live.Error) -> Any:
        error = event.error if isinstance(event.error, dict) else {}
        aimed = error.get("client_event_id") or event.client_event_id
        self._command_refused(aimed)   # a refused create starts no response
        verdict = self._client_create_refused(aimed, error)
        if verdict is not UNCLAIMED:
            return verdict
        if isinstance(aimed, str) and aimed.startswith(self.ctx.id_prefix + "_"):
            self.ctx.notice("upstream_error", {"what": aimed, "call_id": None, "code": error.get("code"),
                                               "message": error.get("message")})
            return DROP if self._hiding else SAME
        return SAME

    _UPSTREAM: dict[type, Callable[["LiveEngine", Any], Any]] = {
        live.SessionStarted: _on_session,
        live.SessionUpdated: _on_session,
        live.SessionClosed: _on_closed,
        live.InputTranscriptDelta: _on_transcript,
        live.OutputTranscriptDelta: _on_transcript,
        live.DelegationCreated: _on_delegation,
        live.ResponseEnvelope: ResponsesDelegation._on_backend,
        live.DecisionEvent: _on_decision,
        live.Error: _on_error,
        live.InstructionsAppended: LiveRecords._on_appended,
        live.ThinkingAppended: LiveRecords._on_appended,
        live.CommentaryAppended: LiveRecords._on_appended,
    }

    def _deliver(self, entry: CallEntry, rendered: RenderedOutput) -> None:
        if entry.call_id in self._carried:   # asked in a dropped session: told, and said, in the new one
            self._answer(entry, self._carried_answer(entry, rendered.output, rendered.is_error))
            self._continue_carried()
            return
        if DELEGATED in entry.delivered_as:
            self._offsets.pop(entry.call_id, None)
            tool = self.tools.get(entry.name)
            appends = answer_appends(rendered.output, is_error=rendered.is_error, message=entry.message,
                                     speak=entry.speak, on_failure=tool.on_failure if tool is not None else None)
            kinds = {Channel.THINKING: live.ThinkingAppend, Channel.COMMENTARY: live.CommentaryAppend}
            self._answer(entry, [kinds[a.channel](delegation_id=entry.call_id, content=a.content) for a in appends])
            return
        batch = self.batches.of_call(entry.call_id)
        if batch is None or batch.completed:
            self._send_output(entry)
            if batch is not None:
                self._continue(batch)
        # else: it goes up once the backend response completed (`_response_over`)

    # ---- a delegate's progress filler (`on_delay`) ----
    def _handler_started(self, entry: CallEntry, tool: ToolSpec) -> None:
        if DELEGATED in entry.delivered_as and tool.on_delay is not None:
            milliseconds, text = tool.on_delay
            self._fillers[entry.call_id] = (self.ctx.now + milliseconds / 1000.0, text)

    def _drop_fillers(self, call_id: str) -> None:
        self._fillers.pop(call_id, None)

    def _other_deadlines(self) -> Iterable[float]:
        # while the sideband is away a filler waits for its return (said then, if the delegate
        # still works: its answer drops it), as every append of the relay's does
        fillers = self._fillers.values() if self.ctx.upstream_connected else ()
        return [*super()._other_deadlines(), *(when for when, _ in fillers)]

    def _tick(self) -> None:
        super()._tick()
        for call_id, (when, text) in list(self._fillers.items()):
            if when <= self.ctx.now and self.ctx.upstream_connected:
                del self._fillers[call_id]   # spoken while the delegate still works: not its answer
                pieces = [live.CommentaryAppend(delegation_id=call_id, content=piece) for piece in split_text(text)]
                for piece in pieces:
                    self._send(piece)
                self.ctx.notice("filler", {"event_id": pieces[0].event_id if pieces else None, "call_ids": call_id,
                                           "text": text})

    def _streamed(self, entry: CallEntry, value: Any, rendered: RenderedOutput) -> None:
        """A streaming tool's first value is its answer (a Live call takes one output)."""
        if entry.state is CallState.RUNNING:
            self._decide(entry, rendered, CallOutcome.OK, self.tools.get(entry.name), handler_done=False)

    def _on_close(self) -> None:
        self._unsent.clear()
        self._offsets.clear()

    # ==== a new session for a dropped one (`relay serve --live-reseed`) ====================
    def new_session(self, now: float) -> tuple[str | None, list[Any]]:
        """The upstream connection dropped (`upstream_disconnected` first): the `session.start`
        of a new session that carries this one on (`relay.engine.reseed`), and the actions of
        the switch; None when there is nothing to carry on (no `session.start` went up, as on a
        sideband, or the server closed the session). What the relay's tools answered goes into
        the new session's history (a developer note each) and is not sent again; a call or
        delegation still running is answered in the new session, once, as silent context (its
        call_id and delegation_id are the dropped session's); batches and delegations of the
        dropped session are forgotten, its calls' outputs wait for `upstream_reconnected`."""
        frame: list[str | None] = [None]

        def switch() -> None:
            frame[0] = self._new_session()

        actions = self._run(now, Source.UPSTREAM, switch)
        return frame[0], actions

    def _new_session(self) -> str | None:
        if self._started is None or self.ended_by_provider is not None or self.ctx.closed:
            return None
        notes = self._carry_over()
        self._new_backend()
        self._client_delegations.clear()
        self._decisions.clear()
        self._offsets.clear()
        self._fillers.clear()   # a filler names its delegation, which the new session does not know
        self.mode = delegation_type(self._started) or CLIENT
        self._new_one_starting = True
        session = seeded_session(self._started, self.transcript.turns(), notes)
        self._notes.update(notes)
        self.ctx.anomaly(f"the upstream connection dropped: a new session carries it on, seeded with "
                         f"{len(session['input'])} messages", None)
        return live.encode(live.SessionStart(event_id=self.ctx.new_event_id(), session=session))

    # ==== client ========================================================================
    def _client_frame(self, frame: str | bytes) -> None:
        if self._refused:
            return   # the session is closing: nothing more of this client goes up
        if self.forwards_client(frame):
            self.ctx.emit(SendUpstream(frame))
            return
        event = live.decode(frame)
        if isinstance(event, live.Unknown):
            if self._unknown(frame, "client") is not None:
                self.ctx.emit(SendUpstream(frame))   # the server answers it in its own words
            else:
                self.ctx.client_error("invalid_event", "the frame is not a JSON object with a string `type`")
            return
        handler = self._CLIENT.get(type(event))
        result = SAME if handler is None else handler(self, event)
        if result is SAME:
            self.ctx.emit(SendUpstream(frame))
        elif result is not DROP:
            self.ctx.emit(SendUpstream(live.encode(result)))
        self._forwarded()

    def _client_start(self, event: live.SessionStart) -> Any:
        """The client's `session.start`: seeded with the conversation so far when it resumes a
        session (`seeded_start`), then as any session's."""
        session = event.session if isinstance(event.session, dict) else None
        seeded = event if session is None else live.SessionStart(event_id=event.event_id, session=self.seeded_start(session))
        result = self._client_session(seeded)
        return seeded if result is SAME and seeded.session is not session else result

    def _client_append(self, event: live.InstructionsAppend | live.ThinkingAppend | live.CommentaryAppend) -> Any:
        delegation_id = event.delegation_id
        if not isinstance(delegation_id, str):
            return SAME
        entry = self.ledger.get(delegation_id)
        if entry is not None and DELEGATED in entry.delivered_as:
            self.ctx.client_error("relay_owned_delegation", f"delegation {delegation_id} is answered by the relay's "
                                  "delegate; the client's append was not forwarded", event.event_id)
            return DROP
        if delegation_id not in self._client_delegations:
            self.ctx.anomaly(f"the client's append names delegation {delegation_id}, which the relay never saw",
                             "append")
        return SAME

    _CLIENT: dict[type, Callable[["LiveEngine", Any], Any]] = {
        live.SessionStart: _client_start,
        live.SessionUpdate: DelegatedTools._client_session,
        live.ResponseItemCreate: ClientAsks._client_item,
        live.ResponseCreate: ClientAsks._client_create,
        live.InstructionsAppend: _client_append,
        live.ThinkingAppend: _client_append,
        live.CommentaryAppend: _client_append,
    }


__all__ = ["BARGE_IN_GRACE_MS", "LiveEngine"]
