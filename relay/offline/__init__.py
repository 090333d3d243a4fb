"""Recordings and tests without a provider: replay, export, the test harness on virtual time, the pytest plugin."""
