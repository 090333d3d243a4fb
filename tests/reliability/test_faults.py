"""Faults, on real sockets: the upstream goes away at every stage of a tool call, the client goes
away mid-handler, handlers raise, hang and block, the upstream cannot be reached, a peer stops
reading or never answers a close, the relay is stopped with calls running, the disk fails. No
crash, a clear close code, and no tool call left without its one output while the upstream is
there to take it."""

from __future__ import annotations

import asyncio

from websockets.asyncio.server import ServerConnection

from tests.reliability.kit import LeakGuard, bare_upstream, session_created


async def test_an_upstream_that_never_answers_the_close_is_cut_off(guard: LeakGuard) -> None:
    async def silent_after_hello(upstream: ServerConnection) -> None:
        await upstream.send(session_created())
        upstream.transport.pause_reading()   # reads nothing more: the closing handshake goes unanswered
        await upstream.wait_closed()

    async with bare_upstream(silent_after_hello) as url, guard.relay(url) as server:
        async with guard.client(server) as client:
            await client.wait_type("session.created")
            session = next(iter(server.sessions.values()))
        await asyncio.wait_for(session.wait_closed(), 3)
        assert session.loop is not None
        # the provider connection is dropped, not left open in CLOSING for ever
        await asyncio.wait_for(session.loop.upstream.wait_closed(), 1)
