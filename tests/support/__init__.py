"""What the tests share, one module per concern. Test files import from here; conftest.py files
hold only fixtures.

- `local_mock`: the project's mock upstream run in-process (no loop, no sockets), for engine tests.
- `engine`: one engine driver for every dialect, with a fake clock.
- `peers`: in-memory sockets for the async edge (`SessionLoop`), one of them backed by `local_mock`.
- `frames`: wire messages to send, and readers for what was received.
- `tools`: the shared example tools, their declarations, and the mock scripts that call them.
- `clients`: realtime, Gemini Live and SDK clients on real sockets, HTTP GET, an httpx request, a TLS
  certificate.
- `relays`: `relay serve` and a sidecar in front of the mock, log capture, the `LeakGuard`.
- `processes`: the `relay` command in a subprocess, and its JSON log lines.
- `sdk`: events checked against the official SDKs' types.
- `keys`: the provider keys and relay token the tests hand out.
- `paths`: the checkout and the shared recordings.
"""
