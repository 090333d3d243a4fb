"""Who a browser page may be (relay/session/access.py): the origins the realtime endpoint takes with
and without a token, and the host names the live inspector answers to."""

from __future__ import annotations

import pytest

from relay.session.access import foreign_host, host_name, listed_origins, page_hosts

PAGE = [("Origin", "https://evil.example")]


def test_without_a_token_and_without_a_list_no_page_is_taken_and_other_clients_are() -> None:
    assert listed_origins(PAGE, (), token_required=False) == "https://evil.example"
    assert listed_origins([("Origin", "http://localhost:3000")], (), token_required=False) == "http://localhost:3000"
    assert listed_origins([("User-Agent", "sdk")], (), token_required=False) is None
    assert listed_origins(PAGE, (), token_required=True) is None   # the page must hold the token
    assert listed_origins(PAGE, ("https://evil.example",), token_required=False) is None


@pytest.mark.parametrize("value, name", [
    ("127.0.0.1:8000", "127.0.0.1"), ("[::1]:8000", "::1"), ("LocalHost.:9", "localhost"), ("localhost", "localhost"),
    ("evil.example:8000", "evil.example"), ("[::1", "::1"),
])
def test_a_host_header_is_read_as_its_name(value: str, name: str) -> None:
    assert host_name(value) == name


def test_the_inspector_answers_to_loopback_its_address_and_the_allowed_origins_hosts() -> None:
    hosts = page_hosts("192.0.2.7", ["https://app.example:3000"], None)
    assert hosts == {"localhost", "127.0.0.1", "::1", "192.0.2.7", "app.example"}
    for name in ("localhost:8000", "127.0.0.1:8000", "[::1]:8000", "192.0.2.7:8000", "app.example"):
        assert foreign_host([("Host", name)], hosts) is None
    assert foreign_host([("Host", "127.0.0.1.nip.io:8000")], hosts) == "127.0.0.1.nip.io:8000"
    assert foreign_host([("Host", "127.0.0.1"), ("Host", "evil.example")], hosts) == "evil.example"
    assert foreign_host([], hosts) is None   # not a browser


def test_on_every_interface_any_name_with_a_token_and_loopback_names_without() -> None:
    assert page_hosts("0.0.0.0", [], "token") is None
    assert page_hosts("::", [], None) == {"localhost", "127.0.0.1", "::1"}
