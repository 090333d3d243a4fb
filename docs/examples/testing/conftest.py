"""A failing scripted session is saved for `relay inspect`: here, under each test's own tmp_path
rather than the machine's shared relay-sessions/ directory."""

import pytest


@pytest.fixture(autouse=True)
def sessions_under_tmp_path(tmp_path, monkeypatch):
    monkeypatch.setenv("RELAY_SESSIONS_DIR", str(tmp_path / "relay-sessions"))
