"""Standard Webhooks signatures as OpenAI applies them, checked against the `openai` package's own
verifier (used here only, never at runtime), and the bounded memory of delivery ids."""

from __future__ import annotations

import base64
import time

import pytest
from openai import InvalidWebhookSignatureError, OpenAI

from relay.edges.sidecar import (
    InvalidSignature,
    RecentIds,
    signature,
    signed_headers,
    signing_key,
    verify,
)

SECRET = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()
BODY = b'{"id":"evt_1","object":"event","type":"realtime.call.incoming","created_at":1,"data":{"call_id":"rtc_1"}}'
NOW = 1_760_000_000


def sdk_verify(secret: str, body: bytes, headers: dict[str, str]) -> None:
    """The `openai` package's verifier, whose clock is the real one."""
    OpenAI(api_key="sk-test", webhook_secret=secret).webhooks.verify_signature(body, headers)


@pytest.mark.parametrize("secret", [SECRET, "a plain secret without prefix"])
def test_signatures_match_the_openai_package(secret: str) -> None:
    now = int(time.time())
    headers = signed_headers(secret, BODY, webhook_id="wh_1", timestamp=now)
    sdk_verify(secret, BODY, headers)
    assert verify(signing_key(secret), headers, BODY, now=now) == "wh_1"
    assert headers["webhook-signature"].startswith("v1,")


def test_a_tampered_body_or_another_secret_is_refused_by_both() -> None:
    now = int(time.time())
    headers = signed_headers(SECRET, BODY, webhook_id="wh_1", timestamp=now)
    tampered = BODY.replace(b"rtc_1", b"rtc_2")
    with pytest.raises(InvalidWebhookSignatureError):
        sdk_verify(SECRET, tampered, headers)
    with pytest.raises(InvalidSignature, match="no webhook-signature entry matches"):
        verify(signing_key(SECRET), headers, tampered, now=now)
    with pytest.raises(InvalidSignature):
        verify(signing_key("whsec_" + base64.b64encode(b"another key").decode()), headers, BODY, now=now)
    with pytest.raises(InvalidSignature):   # same id and body, another timestamp: signed over all three
        verify(signing_key(SECRET), {**headers, "webhook-timestamp": str(now + 1)}, BODY, now=now)


def test_any_matching_entry_verifies_so_secrets_can_rotate() -> None:
    old_key, new_key = signing_key("old secret"), signing_key(SECRET)
    entries = f"{signature(old_key, 'wh_1', str(NOW), BODY)} {signature(new_key, 'wh_1', str(NOW), BODY)}"
    headers = {"webhook-id": "wh_1", "webhook-timestamp": str(NOW), "webhook-signature": entries}
    assert verify(new_key, headers, BODY, now=NOW) == "wh_1"
    assert verify(old_key, headers, BODY, now=NOW) == "wh_1"
    unversioned = signature(new_key, "wh_1", str(NOW), BODY).removeprefix("v1,")
    with pytest.raises(InvalidSignature):
        verify(new_key, {**headers, "webhook-signature": f"v2,{unversioned}"}, BODY, now=NOW)


@pytest.mark.parametrize(("offset", "accepted"), [(-300, True), (300, True), (-301, False), (301, False)])
def test_the_timestamp_must_be_within_five_minutes(offset: int, accepted: bool) -> None:
    key = signing_key(SECRET)
    headers = signed_headers(SECRET, BODY, webhook_id="wh_1", timestamp=NOW + offset)
    if accepted:
        assert verify(key, headers, BODY, now=NOW) == "wh_1"
    else:
        with pytest.raises(InvalidSignature, match="older than 300 s" if offset < 0 else "300 s ahead"):
            verify(key, headers, BODY, now=NOW)


def test_missing_or_malformed_headers_are_refused() -> None:
    key = signing_key(SECRET)
    headers = signed_headers(SECRET, BODY, webhook_id="wh_1", timestamp=NOW)
    with pytest.raises(InvalidSignature, match="missing header webhook-id, webhook-signature"):
        verify(key, {"webhook-timestamp": str(NOW)}, BODY, now=NOW)
    with pytest.raises(InvalidSignature, match="not a Unix time"):
        verify(key, {**headers, "webhook-timestamp": "yesterday"}, BODY, now=NOW)


def test_signing_keys() -> None:
    assert signing_key("whsec_" + base64.b64encode(b"\x00\xffkey").decode()) == b"\x00\xffkey"
    assert signing_key("plain") == b"plain"
    with pytest.raises(ValueError, match="not base64"):
        signing_key("whsec_not*base64")


def test_recent_ids_forget_the_oldest_first() -> None:
    recent = RecentIds(limit=2)
    assert recent.add("a") and recent.add("b")
    assert not recent.add("a")
    assert recent.add("c") and len(recent) == 2
    assert "a" not in recent and "b" in recent and "c" in recent
    recent.discard("b")
    assert recent.add("b")
