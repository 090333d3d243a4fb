"""The secrets the tests hand out: distinctive, so that a scan for one cannot match by chance."""

PROVIDER_KEY = "sk-proj-RELIABILITY-0f1e2d3c4b5a69788796a5b4"
"""The OpenAI provider key: the mock requires it, the relay holds it, nothing else may show it."""
GEMINI_KEY = "AIza-test-SECRET-0123456789"
RELAY_TOKEN = "relay-token-reliability-5e6f"
"""The token a client presents to the relay."""
