"""Fixtures of the deployment tests: HAProxy (Debian's package), or a skip that names the install
command; under CI=true a missing HAProxy fails instead, so a missing install step cannot pass
unnoticed."""

from __future__ import annotations

import pytest

from tests.support.processes import missing_program, script_module


@pytest.fixture(scope="session")
def haproxy() -> str:
    cluster = script_module("cluster")
    program = cluster.find_haproxy()
    if program is None:
        missing_program(f"HAProxy is not installed: {cluster.INSTALL_HAPROXY}")
    return program
