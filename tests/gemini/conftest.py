"""Fixtures for Gemini Live tests."""

from __future__ import annotations

import pytest

from tests.support.clients import Certificate


@pytest.fixture(scope="session")
def loopback_certificate(tmp_path_factory: pytest.TempPathFactory) -> Certificate:
    """A self-signed certificate for 127.0.0.1: the google-genai SDK connects with wss://."""
    return Certificate.create(tmp_path_factory.mktemp("tls"))
