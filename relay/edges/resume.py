"""`relay serve --store`: clients that reconnect and continue their session, on any replica.

With a store, each proxied session of the OpenAI Realtime family is resumable. At connect the
client is handed a **resume token** in the first `session.created` it receives, as a
relay-namespaced field the official SDKs keep as an extra (`"relay": {"resume_token": ...,
"resume_expires_in": seconds}`). The token is 256 random bits (`secrets`); the store never holds
it, only a key derived from it and the relay's client credential (an HMAC keyed by the relay
token), so a token without that credential finds nothing, and a reader of the store cannot
resume anything. It never holds nor reveals the provider key.

While the session runs, its conversation is kept in the store (`ResumeKeeper`: the engine's items
as words, the client's session configuration: relay/engine/resume.py), written when a response
ends, when a call is answered, every third of the token's life and when the session ends, never
per audio frame. The session is held under a lease on its id (relay/store/lease.py): one live
connection per session, and the call records it writes carry the lease's token.

A client that reconnects with the token (the `x-relay-resume` header or the `resume` query
parameter) to any replica sharing the store gets a new upstream session seeded with the
conversation so far (`ResumingLoop.resume`): the client's session configuration, then every item
as the relay's own (hidden from the client, which has them), then the calls the old connection
owed, finished exactly once by the call ledger's rules (relay/edges/takeover.py): a call whose
output is in the conversation is answered; one that never started runs; one whose output was
decided is answered with it; one that started runs again only if its tool is idempotent or takes
the idempotency key, else it is answered "interrupted; not retried"; a follow-up owed is asked
for once. The session keeps its id, so its calls keep their records and idempotency keys. A
token that is unknown, expired or bound to another credential, a session still held by a live
connection, or a store that does not answer: an error event, a close (1008), one log line.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import anyio

from relay.dialects import Dialect, items
from relay.dialects.openai import FUNCTION_CALL, FUNCTION_CALL_OUTPUT, OpenAIFamily
from relay.edges.takeover import RUN, Adoption, Decision, adopt, resend_if_lost
from relay.engine import OpenAIEngine, SendClient, StartHandler
from relay.engine.records import CallRecord, Phase
from relay.engine.resume import ResumeState, state_of
from relay.recording.format import RELAY_TO_CLIENT
from relay.session.http import Request
from relay.session.loop import SessionLoop
from relay.session.policy import POLICY_VIOLATION
from relay.store.base import StoreError
from relay.store.lease import SessionLease
from relay.store.writeahead import WriteAhead
from relay.tools import ToolRegistry

log = logging.getLogger("relay.server")

RESUME_HEADER = "x-relay-resume"
RESUME_QUERY = "resume"
TOKEN_FIELD = "relay"   # the field of `session.created` that carries the token
ID_PREFIX = "rs"        # an owed call's item in a resumed session: rs_i_<call_id>
_SESSION_CREATED = items.event_name(items.SessionCreated)
_SENT = frozenset({Phase.SENT, Phase.FOLLOW_UP, Phase.FOLLOWED_UP})


Planner = Callable[[ResumeState, list[CallRecord], ToolRegistry], "Resumption"]
"""A resumed session's plan for a dialect outside the OpenAI Realtime family (relay/edges/history_resume.py)."""


class ResumeRefused(Exception):
    """A resume the relay refuses: `code` for the client's error event and the metric."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def resume_token_of(request: Request) -> str | None:
    """The resume token a client presents: the `x-relay-resume` header, else `?resume=`."""
    token = request.headers.get(RESUME_HEADER)
    if token is None:
        token = next((value for name, value in request.query if name == RESUME_QUERY), None)
    return token.strip() if token is not None else None


def resume_key(token: str, credential: str | None) -> str:
    """Where a token's session is kept: bound to the relay's client credential, never the token."""
    return hmac.new((credential or "").encode(), token.encode(), hashlib.sha256).hexdigest()


@dataclass
class Resumption:
    """A resumed session's start: its state, the items to seed, and the owed calls' adoption."""

    state: ResumeState
    seed: list[dict[str, Any]]
    adoption: Adoption


def plan(state: ResumeState, records: list[CallRecord], tools: ToolRegistry, family: OpenAIFamily) -> Resumption:
    """What a resumed session is seeded with and owes: the conversation's items (an output kept in
    a record but not yet in the kept conversation added after its call), the owed calls told to
    the engine as the response that made them (their call items seeded under the adoption's ids)."""
    answered = state.answered()
    adoption = adopt([record for record in records if record.call_id not in answered
                      or record.phase is Phase.FOLLOW_UP], tools, family=family, id_prefix=ID_PREFIX)
    owed = set(adoption.decisions)
    seed = state.without_calls(owed)
    known = {item.get("call_id") for item in seed if item.get("type") == FUNCTION_CALL}
    for record in records:
        if record.call_id in owed:
            seed.append({"type": FUNCTION_CALL, "id": f"{ID_PREFIX}_i_{record.call_id}", "call_id": record.call_id,
                         "name": record.name, "arguments": record.arguments})
        elif record.call_id not in answered and record.phase in _SENT and record.output is not None:
            if record.call_id not in known:
                seed.append({"type": FUNCTION_CALL, "id": f"{ID_PREFIX}_c_{record.call_id}",
                             "call_id": record.call_id, "name": record.name, "arguments": record.arguments})
            seed.append({"type": FUNCTION_CALL_OUTPUT, "id": record.item_id or f"{ID_PREFIX}_o_{record.call_id}",
                         "call_id": record.call_id, "output": record.output})
    return Resumption(state, seed, adoption)


class Resumes:
    """One server's resumable sessions: tokens handed out and looked up, leases, counts (what
    `/healthz` and the metrics report)."""

    def __init__(self, write_ahead: WriteAhead, *, credential: str | None, seconds: float,
                 lease_seconds: float, owner: str, plans: dict[str, Planner] | None = None) -> None:
        self.write_ahead = write_ahead
        self.plans = plans or {}   # a dialect's name -> its plan, for the dialects of other families
        self.store = write_ahead.store
        self.credential = credential
        self.seconds = seconds
        self.lease_seconds = lease_seconds
        self.owner = owner
        self.counts: Counter[str] = Counter()   # issued, resumed, refused_<code>
        self.on_count: Callable[[str], None] | None = None

    def count(self, what: str) -> None:
        self.counts[what] += 1
        if self.on_count is not None:
            self.on_count(what)

    def supports(self, dialect: Dialect) -> bool:
        return isinstance(dialect, OpenAIFamily) or dialect.name in self.plans

    def lease(self, session_id: str, connection: str, on_lost: Callable[[str], None]) -> SessionLease:
        """The lease that holds `session_id` for one `connection` (its owner: this replica and it)."""
        return SessionLease(self.write_ahead, session_id, owner=f"{self.owner}:{connection}", target="",
                            ttl=self.lease_seconds, on_lost=on_lost)

    async def find(self, token: str, dialect: Dialect, tools: ToolRegistry, connection: str,
                   on_lost: Callable[[str], None]) -> tuple[Resumption, SessionLease]:
        """The session `token` resumes, held under its lease, with its plan. ResumeRefused if not."""
        if not self.supports(dialect):
            raise ResumeRefused("resume_not_supported",
                                f"sessions of the {dialect.name} dialect are not resumed with a resume token "
                                "(Gemini Live: with the relay's handle in the setup's sessionResumption)")
        key = resume_key(token, self.credential)
        state = await self._state(key)
        if state.dialect != dialect.name:
            raise ResumeRefused("resume_token_invalid", "the resume token belongs to a session of another dialect")
        lease = await self.hold(state.session_id, connection, on_lost)
        try:
            state = await self._state(key)   # the last one its previous connection wrote, before it let go
            records = await self.write_ahead.read(state.session_id)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await lease.end()
            raise
        if dialect.name in self.plans:
            return self.plans[dialect.name](state, records, tools), lease
        assert isinstance(dialect, OpenAIFamily)
        return plan(state, records, tools, dialect), lease

    async def hold(self, session_id: str, connection: str, on_lost: Callable[[str], None]) -> SessionLease:
        """The lease of a session being resumed, held for `connection`; ResumeRefused if not."""
        lease = self.lease(session_id, connection, on_lost)
        held = await lease.hold()
        if held is None:
            raise ResumeRefused("store_unavailable", "the relay's store did not answer; try again")
        if not held:
            raise ResumeRefused("resume_token_in_use", "the session of this resume token is open on another "
                                "connection; resume it once that one has ended")
        return lease

    async def keep(self, token: str, session_id: str, state: str, *, warn: str | None) -> bool:
        """Write a session's resume state under its token's key: whether it was kept. Not kept,
        one log line for the session `warn` names (None: it had its line; the store's own
        degraded line says the rest)."""
        try:
            with anyio.fail_after(self.write_ahead.timeout * 4):
                await self.store.keep_resume(resume_key(token, self.credential), session_id, state, self.seconds)
        except (StoreError, TimeoutError) as exc:
            if warn is not None:
                log.warning("resume state not kept (%s): a reconnect may not find this session",
                            exc or "the store did not answer", extra={"session_id": warn})
            return False
        return True

    async def state_of(self, token: str) -> ResumeState:
        """The state kept for `token` (with the relay's credential); ResumeRefused if none."""
        return await self._state(resume_key(token, self.credential))

    async def _state(self, key: str) -> ResumeState:
        try:
            with anyio.fail_after(self.write_ahead.timeout * 4):
                text = await self.store.resume_state(key)
        except (StoreError, TimeoutError):
            raise ResumeRefused("store_unavailable", "the relay's store did not answer; try again") from None
        if text is None:
            raise ResumeRefused("resume_token_invalid", "unknown or expired resume token")
        try:
            return ResumeState.from_json(text)
        except ValueError:
            raise ResumeRefused("resume_token_invalid", "the resume token's session cannot be read") from None


@dataclass
class ResumeKeeper:
    """One resumable session's state in the store: written at its start, when it changed
    (`changed`: a response ended, a call was answered), every third of the token's life while it
    runs (its expiry moves on), and once more at its end (`close`, which then lets the lease go)."""

    resumes: Resumes
    token: str
    engine: Any   # the OpenAI Realtime family's engine here; another family's in its keeper (`state`)
    lease: SessionLease | None = None
    items: list[dict[str, Any]] = field(default_factory=list)   # the last state's (a resumed one's seed first)
    _dirty: anyio.Event = field(default_factory=anyio.Event)
    _failed: bool = False

    def changed(self) -> None:
        self._dirty.set()

    async def keep(self) -> None:
        """Write the state as it changes, and renew the lease, until cancelled."""
        async with anyio.create_task_group() as tasks:
            if self.lease is not None:
                tasks.start_soon(self.lease.keep, name="resume lease")
            while True:   # written at once (a client may leave before anything happens), then as it changes
                self._dirty = anyio.Event()
                await self.write()
                with anyio.move_on_after(self.resumes.seconds / 3):
                    await self._dirty.wait()

    def state(self) -> ResumeState:
        """The session now, as a resume state."""
        return state_of(self.engine, self.items)

    async def write(self) -> None:
        resumes = self.resumes
        kept = self.state()
        self.items = kept.items
        session_id = self.engine.session_id
        if not await resumes.keep(self.token, session_id, kept.to_json(), warn=None if self._failed else session_id):
            self._failed = True

    async def close(self) -> None:
        with anyio.CancelScope(shield=True):
            if self.lease is None or not self.lease.lost.is_set():
                await self.write()   # the last state, before another connection may take the session
            if self.lease is not None:
                await self.lease.end()


class ResumingLoop(SessionLoop):
    """A resumable session's loop: hands the client its token in the first `session.created`,
    seeds a resumed session and finishes its owed calls (`resume`), and stops for good when
    another connection took the session (`lose`)."""

    token_event = _SESSION_CREATED   # the first event of this type the client gets carries the token

    def __init__(self, engine: OpenAIEngine, *, token: str, expires_in: float, **options: Any) -> None:
        super().__init__(engine, **options)
        self._token = token
        self._expires_in = expires_in
        self._token_due = True
        self._adopted: dict[str, Decision] = {}
        self.lost: str | None = None

    @property
    def token(self) -> str:
        return self._token

    def act_send_client(self, action: SendClient) -> None:
        frame = action.frame
        if not self._token_due or not isinstance(frame, str) or self.token_event not in frame[:120]:
            super().act_send_client(action)
            return
        event = json.loads(frame)
        if event.get("type") != self.token_event:
            super().act_send_client(action)
            return
        self._token_due = False
        # recorded (and shown to the live inspector) without the token; sent with it
        recorder = self.recorder
        if recorder is not None:
            recorder.record(RELAY_TO_CLIENT, self._with_token(event, "<resume token>"))
        self.recorder = None
        try:
            super().act_send_client(SendClient(self._with_token(event, self._token)))
        finally:
            self.recorder = recorder

    def _with_token(self, event: dict[str, Any], token: str) -> str:
        return json.dumps({**event, TOKEN_FIELD: {"resume_token": token, "resume_expires_in": self._expires_in}})

    def act_send_upstream(self, action: Any) -> None:
        if self.lost is None:
            super().act_send_upstream(action)

    def act_start_handler(self, action: StartHandler) -> None:
        if self.lost is not None:
            return
        decision = self._adopted.pop(action.call_id, None)
        if decision is None or decision.how == RUN:
            super().act_start_handler(action)
            return
        resend_if_lost(self.engine, action.call_id, decision)
        if self._task_group is not None and decision.outcome is not None:
            outcome = decision.outcome
            self._task_group.start_soon(self._answered, action.call_id, outcome)

    def keeper(self, resumes: Resumes, lease: SessionLease | None, resumption: Resumption | None) -> ResumeKeeper:
        """What keeps this session's state in the store (a resumed one's seed its first items)."""
        assert isinstance(self.engine, OpenAIEngine)
        return ResumeKeeper(resumes, self._token, self.engine, lease, list(resumption.seed) if resumption else [])

    async def _answered(self, call_id: str, outcome: Any) -> None:
        self._handler_finished(call_id, outcome)

    async def resume(self, resumption: Resumption) -> None:
        """Seed the new upstream session, then tell the engine of the owed calls (their response's
        frames are the engine's only: the client never sees them) and the follow-ups owed."""
        await self.started.wait()
        engine = self.engine
        assert isinstance(engine, OpenAIEngine)
        self._apply(engine.seed(resumption.seed, resumption.state.session, self.clock()))
        adoption = resumption.adoption
        self._adopted.update(adoption.decisions)
        for frame in adoption.frames:
            if self.end is not None:
                return
            self._apply([action for action in engine.receive_upstream(frame, self.clock())
                         if not isinstance(action, SendClient)])
        if adoption.follow_ups and self.end is None:
            self._apply(engine.adopt_follow_ups(adoption.follow_ups, self.clock()))

    def lose(self, reason: str) -> None:
        """Another connection holds the session now: nothing more goes up, no handler starts, the
        running ones stop, and this connection closes (one log line)."""
        if self.lost is not None or self.end is not None:
            return
        self.lost = reason
        close_lost(self, reason)


def close_lost(loop: SessionLoop, reason: str) -> None:
    """A session another connection took (`reason`): its handlers stop, and `loop` closes (one log line)."""
    log.warning("session resumed elsewhere (%s): closing this connection", reason,
                extra={"session_id": loop.engine.session_id})
    if loop._runner is not None:
        loop._runner.cancel_all()
    if loop._task_group is not None:
        loop._task_group.start_soon(loop.finish, "relay", POLICY_VIOLATION, "session resumed on another connection")


async def run_resumable(loop: ResumingLoop, keeper: ResumeKeeper, resumption: Resumption | None,
                        on_end: Callable[[str], None]) -> Any:
    """Run `loop` with its state kept (and, resumed, seeded); the state's last write and the
    lease's end come after the loop, before the session counts as over."""
    try:
        async with anyio.create_task_group() as beside:
            beside.start_soon(keeper.keep, name="resume state")
            if resumption is not None:
                beside.start_soon(loop.resume, resumption, name="resume")
            end = await loop.run(on_end=on_end)
            beside.cancel_scope.cancel()
        return end
    finally:
        await keeper.close()


def new_token() -> str:
    return secrets.token_urlsafe(32)


__all__ = ["Planner", "RESUME_HEADER", "RESUME_QUERY", "ResumeKeeper", "ResumeRefused", "close_lost",
           "Resumes", "ResumingLoop", "Resumption", "plan", "resume_key", "resume_token_of", "run_resumable"]
