"""`relay serve --store` with Gemini Live: clients that reconnect and continue, on any replica.

Gemini Live resumes a session with its own handles: a client whose setup asks for them
(`sessionResumption`) is sent `sessionResumptionUpdate {newHandle, resumable}`, and a new connection
whose setup carries `sessionResumption.handle` continues the session (the conversation is the
service's). Through a relay with a store, the client is handed the relay's handle instead of the
service's: one **relay handle** per session (256 random bits, like the Realtime resume token,
relay/edges/resume.py), sent in place of every `newHandle`; the latest handle the service said
resumable is kept in the store under a key derived from the relay handle and the relay's client
credential (`resume_key`), never the relay handle itself, with the session's id, for as long as
a resume token lives. It is written when a new resumable handle comes, every third of that life
and when the session ends; never per audio frame.

A client that connects with `setup.sessionResumption.handle` set to a relay handle (to any
replica sharing the store) gets an upstream connection opened with the service's handle in its
place (the service carries the conversation on), and the session keeps its relay handle. The
service says resumable only while no call waits for its answer, so every relay call before the
kept handle was answered, once, and is in the conversation the service resumes; a call made
after it is lost with the turn that made it (the service's own rule when resuming from an earlier
handle) and its handler is not run again. A relay handle that is unknown, expired or bound to
another credential, one whose session is open on another connection (held under a lease on its
id, relay/store/lease.py), or a store that does not answer: the client's connection is closed
(1008) with the reason, one log line. A client whose setup did not ask for resumption is handed
no handle, and its session cannot be resumed.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio

from relay.dialects.gemini_codec import (
    Setup,
    decode,
    given,
    resumption_handle,
    resumption_update,
    with_new_handle,
    with_resumption_handle,
)
from relay.dialects.gemini_codec import encode as encode_message
from relay.edges.going_away import GoingAwayLoop
from relay.edges.resume import ResumeRefused, Resumes, close_lost, new_token
from relay.engine import GeminiEngine, SendClient, SendUpstream
from relay.engine.resume import ResumeState
from relay.recording.format import RELAY_TO_CLIENT
from relay.session.policy import POLICY_VIOLATION, short_close_reason
from relay.store.lease import SessionLease

log = logging.getLogger("relay.server")

HANDLE = "handle"   # where a kept state holds the service's handle (its `session` object)
RESUME_ID_PREFIX = "gr_"   # a resumable Gemini session's id in the store


class GeminiResumingLoop(GoingAwayLoop):
    """A Gemini Live session's loop under a store: hands the client the relay's handle in place
    of the service's, keeps the service's in the store, and resumes a session a client's setup
    names by a relay handle (the setup goes up with the service's handle in its place)."""

    def __init__(self, engine: GeminiEngine, *, resumes: Resumes, connection: str, **options: Any) -> None:
        super().__init__(engine, **options)
        self.resumes = resumes
        self.connection = connection
        self.token = new_token()             # the relay's handle, the client's
        # the id its state and lease are kept under: not the engine's, whose call records the lease
        # would then fence (each connection's calls are its own: a resumed one reruns none)
        self.resume_id = f"{RESUME_ID_PREFIX}{engine.session_id}"
        self.handle: str | None = None       # the service's latest resumable handle
        self.lease: SessionLease | None = None
        self.lost: str | None = None
        self._setup_seen = False
        self._waiting: list[SendUpstream] | None = None   # upstream frames waiting for a resume's lookup
        self._changed = anyio.Event()
        self._failed = False

    # ---- the client's setup: a relay handle resumes a kept session ----------------------------
    def act_send_upstream(self, action: SendUpstream) -> None:
        if self.lost is not None:
            return
        if self._waiting is not None:
            self._waiting.append(action)
            return
        if not self._setup_seen:   # the first frame up: the setup (the engine lets nothing go before it)
            self._setup_seen = True
            setup = decode(action.frame)
            if isinstance(setup, Setup):
                token = resumption_handle(setup)
                if token is not None and self._task_group is not None:
                    self._waiting = [action]
                    self._task_group.start_soon(self._resume, token, setup, name="gemini resume")
                    return
        super().act_send_upstream(action)

    async def _resume(self, token: str, setup: Setup) -> None:
        try:
            state, lease = await self._find(token)
        except ResumeRefused as refused:
            self.resumes.count(f"refused_{refused.code}")
            log.warning("resume refused: %s", refused, extra={"session_id": self.engine.session_id})
            self._waiting = None
            await self.finish("relay", POLICY_VIOLATION, short_close_reason(f"resume refused: {refused}"))
            return
        self.resumes.count("resumed")
        self.token, self.resume_id, self.lease = token, state.session_id, lease
        self.handle = state.session[HANDLE]
        log.info("session resumed", extra={"session_id": self.engine.session_id, "resumes": state.session_id})
        held, self._waiting = self._waiting or [], None
        first = SendUpstream(encode_message(with_resumption_handle(setup, self.handle)))
        for action in [first, *held[1:]]:
            super().act_send_upstream(action)
        self._release_held(None)
        self._changed.set()

    async def _find(self, token: str) -> tuple[ResumeState, SessionLease]:
        state = await self.resumes.state_of(token)
        handle = state.session.get(HANDLE)
        if state.dialect != self.engine.dialect.name or not isinstance(handle, str) or not handle:
            raise ResumeRefused("resume_token_invalid", "the resume handle belongs to a session of another dialect")
        lease = await self.resumes.hold(state.session_id, self.connection, self.lose)
        try:
            state = await self.resumes.state_of(token)   # the last its previous connection wrote
        except BaseException:
            with anyio.CancelScope(shield=True):
                await lease.end()
            raise
        return state, lease

    # ---- the service's handles: kept, and the relay's handed out in their place -----------------
    def act_send_client(self, action: SendClient) -> None:
        update = resumption_update(action.frame)
        handle = given(update.new_handle) if update is not None else None
        if update is None or not isinstance(handle, str) or not handle:
            super().act_send_client(action)
            return
        if update.resumable is True:
            self.handle = handle
            self._changed.set()
        recorder = self.recorder   # recorded (and shown to the live inspector) without the relay's handle
        if recorder is not None:
            recorder.record(RELAY_TO_CLIENT, with_new_handle(update, "<resume handle>"))
        self.recorder = None
        try:
            super().act_send_client(SendClient(with_new_handle(update, self.token)))
        finally:
            self.recorder = recorder

    # ---- the state in the store, and the lease ------------------------------------------------
    async def run(self, on_end: Any = None) -> Any:
        """The session, its state kept beside it; written once more, and its lease let go, at the end."""
        try:
            async with anyio.create_task_group() as beside:
                beside.start_soon(self._keep, name="gemini resume state")
                end = await super().run(on_end=on_end)
                beside.cancel_scope.cancel()
            return end
        finally:
            with anyio.CancelScope(shield=True):
                if self.handle is not None and (self.lease is None or not self.lease.lost.is_set()):
                    await self._write_state()
                if self.lease is not None:
                    await self.lease.end()

    async def _keep(self) -> None:
        while self.handle is None:   # resumable from the first handle the service gives
            await self._changed.wait()
            self._changed = anyio.Event()
        async with anyio.create_task_group() as tasks:
            if self.lease is None and not self.resumes.write_ahead.degraded:   # a new session: held here
                lease = self.resumes.lease(self.resume_id, self.connection, self.lose)
                if await lease.hold():
                    self.lease = lease
                self.resumes.count("issued")
            if self.lease is not None:
                tasks.start_soon(self.lease.keep, name="gemini resume lease")
            while True:
                self._changed = anyio.Event()
                await self._write_state()
                with anyio.move_on_after(self.resumes.seconds / 3):
                    await self._changed.wait()

    async def _write_state(self) -> None:
        state = ResumeState(self.resume_id, self.engine.dialect.name, {HANDLE: self.handle}).to_json()
        warn = None if self._failed else self.engine.session_id   # one line a session
        if not await self.resumes.keep(self.token, self.resume_id, state, warn=warn):
            self._failed = True

    def lose(self, reason: str) -> None:
        """Another connection holds the session now: nothing more goes up, no handler runs on, and
        this connection closes."""
        if self.lost is not None or self.end is not None:
            return
        self.lost = reason
        close_lost(self, reason)


__all__ = ["GeminiResumingLoop"]
