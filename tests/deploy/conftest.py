"""Fixtures of the deployment tests: HAProxy (Debian's package), or a skip that names the install
command; under CI=true a missing HAProxy fails instead, so a missing install step cannot pass
unnoticed."""

from __future__ import annotations

import os

import pytest

from tests.support.processes import script_module


@pytest.fixture(scope="session")
def haproxy() -> str:
    cluster = script_module("cluster")
    program = cluster.find_haproxy()
    if program is None:
        reason = f"HAProxy is not installed: {cluster.INSTALL_HAPROXY}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and {reason}")
        pytest.skip(reason)
    return program
