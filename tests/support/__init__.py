"""What the tests share, one module per concern; test files import from here, conftest.py files
hold only fixtures.

- `local_mock`: the project's mock upstream run in-process (no loop, no sockets), for engine tests.
- `engine`: one engine driver for every dialect, with a fake clock.
- `peers`: in-memory sockets for the async edge (`SessionLoop`), one of them backed by `local_mock`.
- `frames`: wire messages to send, and readers for what was received.
- `tools`: the shared example tools, their declarations, and the mock scripts that call them.
"""
