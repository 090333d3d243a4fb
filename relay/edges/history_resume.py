"""`relay serve --dialect live --store`: GPT-Live clients that reconnect and continue their session,
on any replica.

GPT-Live has no resume of its own: a new connection is a new session, and what carries a session
on is either a **fork** of a stored session or a new session seeded with **history** (its
`session.start`'s `input`: text only, at most 128 messages and 8,192 tokens). A fork needs the
client's session to have been started with `store: true`, its recording finalised, and no
zero-data-retention; the relay cannot count on any of these for a client that just dropped, so it
seeds history, as `--live-reseed` does for a dropped upstream (relay/engine/reseed.py).

At connect the client is handed a resume token in the first `session.started` it receives, as a
relay-namespaced field the official SDK's models keep as an extra (`"relay": {"resume_token":
..., "resume_expires_in": seconds}`), exactly as a Realtime client is in `session.created`
(relay/edges/resume.py: the token, its key in the store, the lease, and the refusals are that
module's). While the session runs its conversation is kept in the store as words
(`LiveResumeKeeper`: the transcript's turns, after those the session was seeded with), never per
audio frame. A client that reconnects with the token sends its `session.start` as any GPT-Live
client does; the relay seeds its `input` with the conversation so far (`LiveEngine.seeded_start`):
the client's own input first, then a developer note of each answer the relay's tools gave (never
asked for again), then the most recent turns that fit. The calls the old connection owed are
finished exactly once by the ledger's GPT-Live rules (`adopt_live`): a decided answer is given,
a call never started runs, a started one runs again only if its tool is idempotent or takes the
idempotency key (else "interrupted; not retried"); each is answered in the new session as a
silent note (its delegation was the old session's). An answer recorded as sent is never sent again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from relay.dialects import live
from relay.edges.reseed import ReseedingLoop
from relay.edges.resume import ResumeKeeper, Resumes, ResumingLoop, Resumption, new_token
from relay.edges.takeover import adopt_live
from relay.engine import LiveEngine
from relay.engine.records import CallRecord, Phase
from relay.engine.reseed import MAX_INPUT_MESSAGES, done_note
from relay.engine.resume import ResumeState
from relay.store.lease import SessionLease
from relay.tools import ToolRegistry
from relay.tools.delegation import Turn

_SPEAKERS = ("user", "assistant")
_SENT = frozenset({Phase.SENT, Phase.FOLLOW_UP, Phase.FOLLOWED_UP})


@dataclass
class LiveResumption(Resumption):
    """A resumed GPT-Live session's start: the turns and notes that seed its `session.start`."""

    turns: tuple[Turn, ...] = ()
    notes: list[str] = field(default_factory=list)


def turns_of(state: ResumeState) -> tuple[Turn, ...]:
    """The turns a kept state holds (an item of another shape is skipped)."""
    return tuple(Turn(item["speaker"], item["text"]) for item in state.items
                 if item.get("speaker") in _SPEAKERS and isinstance(item.get("text"), str) and item["text"])


def live_plan(state: ResumeState, records: list[CallRecord], tools: ToolRegistry) -> Resumption:
    """What a resumed GPT-Live session is seeded with (the turns, a note per answer already
    given) and owes (the calls `adopt_live` leaves owed)."""
    notes = [done_note(record.name, None if record.delegation_id == record.call_id else record.arguments,
                       record.output)
             for record in records if record.phase in _SENT and record.output is not None]
    turns = turns_of(state)
    return LiveResumption(state, [], adopt_live(records, tools), turns=turns, notes=notes)


@dataclass
class LiveResumeKeeper(ResumeKeeper):
    """A GPT-Live session's state in the store: the turns it was seeded with, then its own."""

    prior: tuple[Turn, ...] = ()

    def state(self) -> ResumeState:
        engine = self.engine
        assert isinstance(engine, LiveEngine)
        turns = [*self.prior, *engine.transcript.turns()][-MAX_INPUT_MESSAGES:]
        items = [{"id": f"t{index}", "speaker": turn.speaker, "text": turn.text} for index, turn in enumerate(turns)]
        return ResumeState(engine.session_id, engine.dialect.name, {}, items)


class LiveResumingLoop(ResumingLoop, ReseedingLoop):
    """A resumable GPT-Live session's loop: the token in the first `session.started`; a resumed
    session's start seeded and its owed calls answered by their decisions (ResumingLoop's); and,
    under `--live-reseed`, a dropped upstream carried on in a new session (ReseedingLoop's)."""

    token_event = live.SessionStarted.__struct_config__.tag

    def keeper(self, resumes: Resumes, lease: SessionLease | None, resumption: Resumption | None) -> ResumeKeeper:
        """The keeper; a resumed session's engine told what seeds its start and what it owes
        before the client's first frame is read."""
        engine = self.engine
        assert isinstance(engine, LiveEngine)
        prior: tuple[Turn, ...] = ()
        if isinstance(resumption, LiveResumption):
            prior = resumption.turns
            self._adopted.update(resumption.adoption.decisions)
            engine.resume_with(resumption.turns, resumption.notes, resumption.adoption.records)
        return LiveResumeKeeper(resumes, self.token, engine, lease, prior=prior)

    async def resume(self, resumption: Resumption) -> None:
        """Nothing to do once running: the engine seeds the client's own `session.start`."""


def live_loop_options(resume_token: str | None, expires_in: float, reconnect: Any, reseed: bool) -> dict[str, Any]:
    """The options of a `LiveResumingLoop` (reseeding a dropped upstream only under `--live-reseed`)."""
    return {"token": resume_token or new_token(), "expires_in": expires_in, **reconnect,
            **({} if reseed else {"attempts": 0})}


PLANS = {live.LIVE.name: live_plan, live.LIVE_AZURE.name: live_plan}

__all__ = ["LiveResumeKeeper", "LiveResumingLoop", "LiveResumption", "PLANS", "live_loop_options", "live_plan"]
