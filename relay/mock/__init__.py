"""A protocol-faithful mock of the realtime API: no provider key, no network.

It is the relay's embedded default upstream (`relay mock`, the demo) and the upstream of its
integration tests, so it behaves like the real service, inconvenient parts included: server ids
and `previous_item_id` ordering, errors that carry the client's `event_id`, one active response at
a time, `function_call_output` items checked against existing calls, unknown fields rejected
(except the Azure AI Foundry extensions in `foundry` mode), cancellation that closes items as
`incomplete`, sideband connections by `call_id`, and a fake REST API for call accept/reject/hangup.

    from relay.mock import Faults, MockScript, MockUpstream, Reply, Rule, ToolCall

    script = MockScript(
        rules=[Rule(match="weather", say="Let me check.",
                    calls=[ToolCall(name="get_weather", arguments={"city": "Paris"})])],
        after_outputs=Reply(say="The weather in Paris is {output}"),
    )
    async with MockUpstream(script=script, dialect="openai", api_key=None, faults=Faults()) as mock:
        mock.url        # ws://127.0.0.1:<port>/v1/realtime   (also /openai/v1/realtime, /openai/realtime)
        mock.base_url   # ws://127.0.0.1:<port>                (AsyncOpenAI(websocket_base_url=base_url + "/v1"))
        mock.rest_url   # http://127.0.0.1:<port2>/v1          (POST /realtime/calls/{call_id}/accept|reject|hangup)
        mock.sessions   # MockSession: id, call_id, items, responses, tools, connections, auth, query, accepts
        mock.received   # Record(session_id, connection, event) for every client event, in order
        mock.sent       # Record(...) for every server event sent, once per connection
        await mock.wait_for(lambda e: e["type"] == "response.create")
        await mock.wait_for_sent(lambda e: e["type"] == "response.done")
        await mock.inject(session, {"type": "surprise"})       # dicts as JSON, str/bytes as raw frames
        mock.start_response(session)                           # a response of the server's own (VAD)
        await mock.user_turn(session, "What's the weather?")   # a spoken turn as server VAD reports it
        mock.release(session)                                  # let a held reply (hold, hold_before_done) end
        call_id = mock.create_call()                           # a session without a socket (SIP-like)

Dialects: `openai` (GA; beta when the client sends `OpenAI-Beta: realtime=v1`), `openai-beta`
(always beta), `azure` (GA on `/openai/v1/realtime`, beta on the preview path
`/openai/realtime?api-version=...`, accepts the `api-key` query parameter), `foundry` (azure plus
the Foundry item fields), `xai` (xAI's quirks), `voicelive` (Voice Live's path and quirks) and
`gemini` (Gemini Live's BidiGenerateContent paths) and `live` (OpenAI's GPT-Live at
`/v1/live/sessions`: `LiveMockSession`, `mock.live_options = LiveOptions(...)`,
`await mock.user_turn(session, text)`, `await mock.close_live(session, reason)`; SIP calls and their
signed webhook: `mock.live_calls`). Scripts are described in
`relay.mock.script`, faults in `relay.mock.faults`, the session rules in `relay.mock.session`;
`docs/mock.md` has the full guide.
"""

from __future__ import annotations

from relay.mock.faults import Faults
from relay.mock.live import LiveMockSession
from relay.mock.live_backend import LiveOptions
from relay.mock.responses import ResponseRun
from relay.mock.script import MockScript, Reply, Rule, StreamOptions, ToolCall
from relay.mock.server import MockUpstream, Record
from relay.mock.session import MockConnection, MockSession
from relay.mock.wire import DIALECTS, Dialect

__all__ = [
    "DIALECTS",
    "Dialect",
    "Faults",
    "LiveMockSession",
    "LiveOptions",
    "MockConnection",
    "MockScript",
    "MockSession",
    "MockUpstream",
    "Record",
    "Reply",
    "ResponseRun",
    "Rule",
    "StreamOptions",
    "ToolCall",
]
