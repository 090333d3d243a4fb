"""The transports: every reach into a library's internals (websockets; uvicorn for the relay's ASGI apps)."""
