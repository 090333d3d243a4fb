"""The invariants the explorer checks on every schedule, each with a name a user can read.

Five read the session's timeline and are the harness's own (`relay.offline.expect.INVARIANTS`);
the others read what the explored session saw (`relay.offline.explore_session.Observed`), its
call book at the end of the conversation, and the frames the caller was sent. A user's own
invariant is a function of the explored session that returns what broke (a message) or None,
given by name: `explore(..., invariants={"refund_once": refund_once})`.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from relay.dialects import gemini_codec as gemini
from relay.dialects import get_dialect, live
from relay.dialects.gemini import GeminiDialect
from relay.dialects.live import LiveDialect
from relay.engine.calls import CallState
from relay.offline.delegation_checks import INJECTION_INCOMPLETE, delegation_appends
from relay.engine.backend_calls import DELEGATED
from relay.engine.client_asks import CLIENT_ID_PREFIX
from relay.offline.scripted_delegations import CLIENT
from relay.offline.events import CALL, FOLLOW_UP, RESPONSE, SPOKEN, decoded
from relay.offline.expect import INVARIANTS, own_verdict, violations
from relay.offline.explore_session import ExploredSession
from relay.offline.timeline import Timeline
from relay.recording.format import RELAY_TO_CLIENT, RELAY_TO_UPSTREAM, UPSTREAM_TO_RELAY, Frame
from relay.session.policy import CLEAN_CLOSE_CODES
from relay.tools import Interruption

Check = Callable[[ExploredSession], "str | None"]

TIMELINE_INVARIANTS = tuple(INVARIANTS)
"""answered_once, one_response_at_a_time, no_create_while_active, spoke_after_tools, one_follow_up"""


def handler_once(session: ExploredSession) -> str | None:
    twice = [call_id for call_id, count in session.observed.starts.items() if count > 1]
    return f"the handler of {twice[0]} ran {session.observed.starts[twice[0]]} times" if twice else None


def cancelled_not_spoken(session: ExploredSession) -> str | None:
    """A call the relay did not answer for the model to hear (withdrawn, skipped, cancelled by a
    barge-in) is never the subject of a follow-up."""
    gone = {entry.call_id for entry in session.engine.ledger if entry.relay_owned and (
        entry.state == CallState.SKIPPED or (entry.outcome is not None and entry.outcome.value == "cancelled"))}
    if not gone:
        return None
    for event in session.timeline.of(FOLLOW_UP):
        spoken = gone.intersection(event.call_ids)
        if spoken:
            return f"the model was asked to speak about {sorted(spoken)[0]}, a call that was cancelled"
    return None


def client_never_sees_relay_call(session: ExploredSession) -> str | None:
    # every relay call the run saw (an explored run numbers them: a history limit forgets some
    # from the call book by the end; a replay's stand-in does not)
    owned = list(dict.fromkeys([*getattr(session.observed, "calls", ()),
                                *(entry.call_id for entry in session.engine.ledger if entry.relay_owned)]))
    if not owned:
        return None
    common = os.path.commonprefix(owned)   # a frame without it holds none of them: one scan a frame
    for frame in session.frames:
        if frame.direction != RELAY_TO_CLIENT:
            continue
        text = frame.raw if frame.raw is not None else (frame.binary or b"").decode("utf-8", "replace")
        if common not in text:
            continue
        seen = next((call_id for call_id in owned if call_id in text), None)
        if seen is not None:
            return f"the client was sent {seen}, a call the relay owns (frame {frame.line_no})"
    return None


_LEFT_AT_A_DROP = (CallState.ABANDONED, CallState.ANNOUNCED, CallState.STREAMING)
"""The states a relay call a dropped connection ended the session on is owed nothing more in: the
session's end abandoned it, or the relay had not learnt that the model finished it (a call whose
item it asked for after a reconnect, the answer lost with the drop)."""


def nothing_owed(session: ExploredSession) -> str | None:
    """At the end of the conversation (before the session closes) every relay call is answered or
    rightly not (skipped); one the session's end abandoned or left half made counts only when the
    connection dropped."""
    dropped = session.closed
    for entry in session.engine.ledger:
        if not entry.relay_owned or entry.state in (CallState.ANSWERED, CallState.SKIPPED):
            continue
        if entry.state in _LEFT_AT_A_DROP and dropped:
            continue
        return f"{entry.call_id} ({entry.name}) is still owed at the end ({entry.state.value})"
    return None


def nothing_sent_while_away(session: ExploredSession) -> str | None:
    """While the upstream connection is away (a `reconnect`), the relay sends nothing upstream (it
    would be lost): what it decided waits for the connection's return."""
    lost = getattr(session, "sent_while_away", ())
    if not lost:
        return None
    return f"the relay sent {len(lost)} frame(s) upstream while the connection was away: {lost[0][:80]}"


def upstream_accepted_every_send(session: ExploredSession) -> str | None:
    """The upstream never closed the session for what it was sent: a close of its own (the Gemini
    mock's 1007 for a message the service refuses, 1011 for one it cannot handle), as opposed to
    one the explorer injects (`drop`, expiry: marked as faults) or a session's ordinary end (1000).
    Such a close ends the session as a dropped connection does, and every other invariant then
    excuses what the session left undone; this one names it."""
    for code, reason in getattr(session, "upstream_closes", ()):
        if code not in CLEAN_CLOSE_CODES:
            return f"the upstream closed the session ({code}: {reason})"
    return None


def cancelled_not_answered(session: ExploredSession) -> str | None:
    """Gemini Live: from the server's `interrupted` until its next message (the turn's
    `toolCallCancellation`, or anything else: then none is coming), the relay sends no answer that
    message then cancels. Such an answer crosses the cancellation of its call: the service needs
    none (docs/gemini.md), and the model might speak of a call the caller talked over. An answer
    sent before the relay heard `interrupted` could not have known, and is not counted. The
    interrupted turn's own `turnComplete` (the first after it, with no words of a new turn) is
    part of the interruption: the cancellation may come after it (docs/gemini.md, "The model
    interrupted"). A client's answer to its own call, which the relay passes on as it came, is the
    client's affair."""
    if not isinstance(session.dialect, GeminiDialect):
        return None
    codec = gemini.turn_codec(session.dialect)
    ledger = session.engine.ledger
    armed = False              # `interrupted` came, and no other message from the upstream since
    ended = False              # the interrupted turn's `turnComplete` came
    sent: dict[str, int] = {}  # call id -> the line of an answer sent while armed
    for frame in session.frames:
        if frame.direction == UPSTREAM_TO_RELAY and (armed or _may_interrupt(frame)):
            for message in gemini.messages_of(decoded(frame), codec) or [None]:
                if isinstance(message, gemini.ToolCallCancellation) and armed:
                    crossed = [i for i in message.ids if i in sent] if isinstance(message.ids, list) else []
                    if crossed:
                        return (f"the relay answered {crossed[0]} after the server's interrupted (frame "
                                f"{sent[crossed[0]]}), and the server then cancelled it (frame {frame.line_no})")
                interrupted = isinstance(message, gemini.ServerContent) and message.interrupted is True
                turn_end = (isinstance(message, gemini.ServerContent) and message.turn_complete is True
                            and message.model_turn is gemini.UNSET)
                if armed and turn_end and not ended and not interrupted:
                    ended = True
                    continue   # the interrupted turn's end: still armed
                if not interrupted:
                    sent.clear()
                armed = interrupted
                ended = interrupted and turn_end
        elif frame.direction == RELAY_TO_UPSTREAM and armed:
            for message in gemini.messages_of(decoded(frame), codec):
                if isinstance(message, gemini.ToolResponse):
                    for answer in gemini.entries(message.function_responses, gemini.FunctionResponse):
                        entry = ledger.get(answer.id) if isinstance(answer.id, str) else None
                        if entry is not None and entry.relay_owned:
                            sent.setdefault(entry.call_id, frame.line_no)
    return None


def one_final_answer(session: ExploredSession) -> str | None:
    """Gemini Live: no call gets a second final answer upstream (the relay's, or a client's it
    passes on: one delivered twice and answered twice). What the service does with one is not
    documented, and the mock takes no notice of it (docs/gemini.md), so nothing else shows it."""
    if not isinstance(session.dialect, GeminiDialect):
        return None
    codec = gemini.turn_codec(session.dialect)
    final: dict[str, int] = {}   # call id -> the line of its final answer
    for frame in session.frames:
        if frame.direction != RELAY_TO_UPSTREAM:
            continue
        for message in gemini.messages_of(decoded(frame), codec):
            if not isinstance(message, gemini.ToolResponse):
                continue
            for answer in gemini.entries(message.function_responses, gemini.FunctionResponse):
                if not isinstance(answer.id, str):
                    continue
                if answer.id in final:
                    return (f"the relay sent {answer.id} an answer (frame {frame.line_no}) after its final "
                            f"one (frame {final[answer.id]})")
                if answer.will_continue is not True:
                    final[answer.id] = frame.line_no
    return None


def _carried_unheard(session: ExploredSession, carried: set[str]) -> str | None:
    """`spoke_after_tools` for a Responses backend call a new session answered for a dropped one
    (GPT-Live's `reseed`): its note names no call the timeline can read, so nothing there asks for
    speech after it; the new session's continuation of its batch says it (docs/gpt-live.md). The
    model speaks after the answer, or the caller who asked heard nothing."""
    spoken = [event.t for event in session.timeline.of(SPOKEN)]
    for call_id in sorted(carried):
        entry = session.engine.ledger.get(call_id)
        if (entry is None or DELEGATED in entry.delivered_as or entry.state is not CallState.ANSWERED
                or entry.injected_at is None):
            continue
        if not any(t >= entry.injected_at for t in spoken):
            return f"nothing was said after the answer to {call_id} ({entry.name}), told in a new session"
    return None


def _may_interrupt(frame: Frame) -> bool:
    """Whether a frame may say `interrupted` (else it is not decoded: most are the model's words)."""
    if frame.event is not None:
        return True
    data = frame.raw if frame.raw is not None else frame.binary
    return data is not None and gemini.may_interrupt(data)


def delegation_answered_once(session: ExploredSession) -> str | None:
    """Client delegation: each delegation the relay's delegate answers is answered by one run of
    appends (sent together), never a second run after it (a progress filler is not an answer)."""
    appends = delegation_appends(session, timeline=session.timeline)
    if appends is None:
        return None
    runs: dict[str, list[float]] = {}
    for frame, append in appends.sent:
        if not appends.filler(append):
            times = runs.setdefault(str(append.delegation_id), [])
            if frame.t not in times:
                times.append(frame.t)
    for call_id, times in runs.items():
        if len(times) > 1:
            return (f"delegation {call_id} was answered by {len(times)} runs of appends "
                    f"(at {', '.join(f'{t:.3f}' for t in times)} s)")
    return None


def interrupted_not_spoken(session: ExploredSession) -> str | None:
    """Client delegation: a delegation whose delegate the caller interrupted, under `cancel` or
    `finish_silently`, is answered silently: no append of its answer asks the model to speak."""
    appends = delegation_appends(session, timeline=session.timeline)
    if appends is None:
        return None
    quiet = {entry.call_id for entry in session.engine.ledger if entry.relay_owned and entry.interrupted
             and appends.policy(entry.name) is not Interruption.FINISH_AND_SPEAK}
    for frame, append in appends.sent:
        if (append.delegation_id in quiet and isinstance(append, live.CommentaryAppend)
                and not appends.filler(append)):
            return (f"delegation {append.delegation_id} was interrupted ({appends.policy(str(append.delegation_id))}) "
                    f"and its answer was spoken anyway (frame {frame.line_no})")
    return None


def appends_placed(session: ExploredSession) -> str | None:
    """GPT-Live: every append the relay sent is placed on the session's timeline (acknowledged),
    or failed because the session ended first (`context_injection_incomplete`, or the connection
    dropped, its session carried on in a new one or not); the server refuses none (but a
    sidecar's create refused as a partial batch for the application's own outputs, which no
    sideband sees: `DelegatingSession.refused_for_app`)."""
    appends = delegation_appends(session, every=True, timeline=session.timeline)
    if appends is None:
        return None
    own = {append.event_id for _, append in appends.sent}
    excused: set[str] | None = None   # (read when a command of the relay's was refused)
    for event_id, code in appends.refused.items():
        if code == INJECTION_INCOMPLETE:
            continue
        if event_id in own:
            return f"the server refused the relay's append {event_id} ({code})"
        if event_id.startswith(CLIENT_ID_PREFIX):
            continue   # a create of the client's the relay forwarded, with an id of the relay's giving
        excused = (_stranded_creates(session, after=0.0) | _crossed_creates(session)
                   | getattr(session, "refused_for_app", set())) if excused is None else excused
        if event_id not in excused:   # a command of the relay's (its `response.create`)
            return f"the server refused the relay's {event_id} ({code})"
    if session.closed:
        return None
    reseeds = getattr(session, "reseeds", ())
    dropped = max(reseeds) if reseeds else -1.0   # what went up before lost its connection (explore_live)
    for frame, append in appends.sent:
        if frame.t > dropped and append.event_id not in appends.placed and append.event_id not in appends.refused:
            return f"the relay's append {append.event_id} was never placed on the timeline (frame {frame.line_no})"
    return None


def _stranded_creates(session: ExploredSession, *, after: float) -> set[str]:
    """GPT-Live, a call the server made while the sideband was away and the relay never saw
    holding its batch open (explore_live `strands_follow_ups`): the event ids of the relay's
    `response.create`s sent from then on, and from `after` on (a time), which the server may
    refuse as partial. Empty when no such call was made."""
    strands = getattr(session, "strands_follow_ups", None)
    since = strands() if strands is not None else None
    if since is None:
        return set()
    # (the timeline rounds its times to the microsecond; the frames keep the loop's)
    since, tag = max(since, after) - 1e-6, f'"{live.ResponseCreate.__struct_config__.tag}"'
    creates = set()
    for frame in session.frames:
        if frame.direction == RELAY_TO_UPSTREAM and frame.t >= since and frame.raw and tag in frame.raw:
            create = live.decode(frame.raw)
            if isinstance(create, live.ResponseCreate) and isinstance(create.event_id, str):
                creates.add(create.event_id)
    return creates


def _crossed_creates(session: ExploredSession) -> set[str]:
    """GPT-Live, Responses delegation: the event ids of the relay's `response.create`s refused
    after crossing a new delegation on the wire (its `session.delegation.created` reached the
    relay after the create went up and before the server's refusal). The mock, as GPT-LIVE.md
    infers the service does, applies the create once that delegation's response is over, whose
    calls the create's batch then lacks: a partial batch, which no relay could have seen coming. The batch is continued by the next
    create (`spoke_after_tools` and `nothing_owed` still check that it is)."""
    create_tag = f'"{live.ResponseCreate.__struct_config__.tag}"'
    delegation_tag = f'"{live.DelegationCreated.__struct_config__.tag}"'
    error_tag = f'"{live.Error.__struct_config__.tag}"'
    sent: dict[str, bool] = {}   # a create of the relay's -> a delegation was announced since
    crossed: set[str] = set()
    for frame in session.frames:
        raw = frame.raw
        if not raw:
            continue
        if frame.direction == RELAY_TO_UPSTREAM and create_tag in raw:
            create = live.decode(raw)
            if isinstance(create, live.ResponseCreate) and isinstance(create.event_id, str):
                sent[create.event_id] = False
        elif frame.direction == UPSTREAM_TO_RELAY and sent:
            if delegation_tag in raw:
                sent = dict.fromkeys(sent, True)
            elif error_tag in raw:
                error = live.decode(raw)
                if isinstance(error, live.Error):
                    named = error.error.get("client_event_id") if isinstance(error.error, dict) else None
                    named = named or error.client_event_id
                    if isinstance(named, str) and sent.pop(named, False):
                        crossed.add(named)
    return crossed


def _follow_up_refused(session: ExploredSession, timeline: Timeline, answer: int) -> bool:
    """Whether the relay sent a `response.create` after the answer at `answer` (the timeline's
    index) that the server refused, a call the relay never saw holding the batch open
    (`_stranded_creates`). A follow-up the relay never asked for still counts."""
    creates = _stranded_creates(session, after=timeline.events[answer].t)
    if not creates:
        return False
    appends = delegation_appends(session, every=True, timeline=timeline)
    return appends is not None and not creates.isdisjoint(appends.refused)


def _follow_up_stranded(session: ExploredSession, timeline: Timeline, answer: int) -> bool:
    """Whether the response that came next after the answer at `answer` (the timeline's index:
    its follow-up, or the model's own next one) made a call the relay never saw, the sideband
    away (`unseen_calls`): its words wait for that call's output, which the relay cannot give
    (docs/gpt-live.md, Re-attach)."""
    unseen = session.unseen_calls() if hasattr(session, "unseen_calls") else set()
    if not unseen:
        return False
    after = timeline.events[answer].t
    following = next((event for event in timeline.of(RESPONSE) if event.t >= after and event.index > answer), None)
    return following is not None and any(call.call_id in unseen and call.response_id == following.response_id
                                         for call in timeline.of(CALL))


SESSION_INVARIANTS: dict[str, tuple[str, Check]] = {
    "handler_once": ("no handler runs twice for one call", handler_once),
    "cancelled_not_spoken": ("a cancelled call's output is never spoken", cancelled_not_spoken),
    "client_never_sees_relay_call": ("the client never sees a call the relay owns", client_never_sees_relay_call),
    "nothing_owed": ("nothing is left owed at the end of the session", nothing_owed),
    "nothing_sent_while_away": ("nothing goes upstream while the connection is away", nothing_sent_while_away),
    "upstream_accepted_every_send": ("the upstream closes the session for nothing it was sent",
                                     upstream_accepted_every_send),
    "cancelled_not_answered": ("no answer goes up, after the server's interrupted, for a call it then cancels",
                               cancelled_not_answered),
    "one_final_answer": ("no call gets an answer upstream after its final one", one_final_answer),
    "delegation_answered_once": ("each client delegation is answered by one run of appends", delegation_answered_once),
    "interrupted_not_spoken": ("an interrupted delegation's answer is spoken only if its delegate says so",
                               interrupted_not_spoken),
    "appends_placed": ("every append of the relay's is placed, unless the session ended first", appends_placed),
}


def _gemini(conversation: Any) -> bool:
    return isinstance(get_dialect(conversation.dialect), GeminiDialect)


def _gpt_live(conversation: Any) -> bool:
    return isinstance(get_dialect(conversation.dialect), LiveDialect)


def _client_delegation(conversation: Any) -> bool:
    return _gpt_live(conversation) and conversation.delegation == CLIENT


def _proxy(conversation: Any) -> bool:
    return conversation.mode == "proxy"


APPLIES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "client_never_sees_relay_call": ("a proxy", _proxy),
    "cancelled_not_answered": ("Gemini Live", _gemini),
    "one_final_answer": ("Gemini Live", _gemini),
    "delegation_answered_once": ("GPT-Live's client delegation", _client_delegation),
    "interrupted_not_spoken": ("GPT-Live's client delegation", _client_delegation),
    "appends_placed": ("GPT-Live", _gpt_live),
}
"""The built-in invariants of one wire or mode: what they are for, and whether an explored
conversation is of it. On any other a check finds nothing to read (it holds on nothing), and
the summary says so rather than counting it held."""


def not_applicable(conversation: Any) -> dict[str, str]:
    """The built-in invariants that do not apply to `conversation`, each with what it is for."""
    return {name: where for name, (where, applies) in APPLIES.items() if not applies(conversation)}


REPLAY_INVARIANT = "replays_same"
DESCRIPTIONS: dict[str, str] = {
    **{name: text for name, (text, _) in INVARIANTS.items()},
    **{name: text for name, (text, _) in SESSION_INVARIANTS.items()},
    REPLAY_INVARIANT: "the recording replays to the same outcome",
}
"""Every built-in invariant's name and what it says."""


def broken(session: ExploredSession, own: dict[str, Check]) -> list[tuple[str, str]]:
    """(invariant, message) for each invariant `session` breaks: the built-in ones, then `own`."""
    with session.checking():
        return _broken(session, own)


def _broken(session: ExploredSession, own: dict[str, Check]) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    timeline = session.timeline
    seen: set[str] = set()
    abandoned = {entry.call_id for entry in session.engine.ledger
                 if entry.relay_owned and entry.state in _LEFT_AT_A_DROP}
    unseen = session.unseen_calls() if hasattr(session, "unseen_calls") else set()
    carried = session.carried_calls() if hasattr(session, "carried_calls") else set()
    unheard: set[str] | None = None   # (read when a withdrawn call's answer is found)
    for name, violation in violations(timeline):
        if any(call_id in violation.message for call_id in unseen):
            continue   # a call nothing the relay received names: it could not know of it
        if "after the server withdrew it" in violation.message and hasattr(session, "unheard_withdrawals"):
            unheard = session.unheard_withdrawals() if unheard is None else unheard
            if any(call_id in violation.message for call_id in unheard):
                continue   # withdrawn in frames the connection lost: the relay could not know
        if "never answered" in violation.message and any(call_id in violation.message for call_id in carried):
            continue   # answered in a new session that carries a dropped one on, naming no id (explore_live)
        if session.closed and abandoned and any(call_id in violation.message for call_id in abandoned):
            continue   # the connection dropped: a call it abandoned or left half made is owed nothing (nothing_owed)
        if session.closed and name == "spoke_after_tools":
            continue   # the connection dropped: no model is left to speak after what was answered
        if name == "spoke_after_tools" and (_follow_up_refused(session, timeline, violation.index)
                                            or _follow_up_stranded(session, timeline, violation.index)):
            continue   # GPT-Live: the relay asked; a call it never saw held the batch open
        if name not in seen:
            seen.add(name)
            found.append((name, violation.message))
    unheard = None if session.closed or "spoke_after_tools" in seen else _carried_unheard(session, carried)
    if unheard is not None:
        found.append(("spoke_after_tools", unheard))
    for name, (_, check) in SESSION_INVARIANTS.items():
        message = check(session)
        if message:
            found.append((name, message))
    for name, check in own.items():
        message = own_verdict(check, session)
        if message:
            found.append((name, message))
    return found


__all__ = ["APPLIES", "DESCRIPTIONS", "REPLAY_INVARIANT", "SESSION_INVARIANTS", "TIMELINE_INVARIANTS", "broken",
           "not_applicable"]
