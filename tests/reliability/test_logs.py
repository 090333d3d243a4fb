"""The relay's logger for websockets: debug lines about frames carry no secret and never break."""

from __future__ import annotations

import logging

import pytest
from websockets.frames import Frame, Opcode

from relay.observe.logs import RedactingLogger
from relay.errors import REDACTED
from relay.recording.redact import Redactor
from tests.support.keys import PROVIDER_KEY


class _Unprintable:
    """An argument whose str() raises, as a library's frame may for bytes that are not text."""

    def __str__(self) -> str:
        raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")


def test_frame_debug_lines_are_redacted_and_an_unprintable_frame_does_not_break_logging(
        caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> None:
    logger = RedactingLogger(logging.getLogger("relay.websocket.test"), Redactor([PROVIDER_KEY]))
    with caplog.at_level(logging.DEBUG, logger="relay.websocket.test"):
        logger.debug("> %s", Frame(Opcode.TEXT, f'{{"echo": "{PROVIDER_KEY}"}}'.encode()))
        # however the websockets library prints a frame that is not UTF-8 (raising in some
        # releases, as hex in others), the line is logged and carries no key
        logger.debug("< %s", Frame(Opcode.TEXT, b"\xff\xfe not UTF-8 " + PROVIDER_KEY.encode()))
        logger.debug("< %s %s", _Unprintable(), PROVIDER_KEY)
        logger.debug("100% literal, no arguments")
    first, second, third, fourth = (record.getMessage() for record in caplog.records)
    assert PROVIDER_KEY not in first and REDACTED in first
    assert second.startswith("< ") and PROVIDER_KEY not in second
    assert third.startswith("< %s %s [arguments not printable: UnicodeDecodeError")
    assert PROVIDER_KEY not in third
    assert fourth == "100% literal, no arguments"
    assert "Logging error" not in capfd.readouterr().err


def test_handshake_debug_lines_carry_no_credential_the_relay_does_not_know(caplog: pytest.LogCaptureFixture) -> None:
    """A session's resume token (header or query) and a client's wrong token are no secrets the
    redactor knows, but the handshake's debug lines print them: their values are masked by name."""
    logger = RedactingLogger(logging.getLogger("relay.websocket.test"), Redactor([PROVIDER_KEY]))
    with caplog.at_level(logging.DEBUG, logger="relay.websocket.test"):
        logger.debug("< GET %s HTTP/1.1", "/v1/realtime?model=gpt-realtime&resume=rt-secret-1&x=2")
        logger.debug("< %s: %s", "X-Relay-Resume", "rt-secret-2")
        logger.debug("< %s: %s", "Authorization", "Bearer wrong-token-3")
        logger.debug("> %s: %s", "api-key", "azure-4")
        logger.debug("< %s: %s", "Upgrade", "websocket")
    lines = [record.getMessage() for record in caplog.records]
    assert lines == ["< GET /v1/realtime?model=gpt-realtime&resume=" + REDACTED + "&x=2 HTTP/1.1",
                     "< X-Relay-Resume: " + REDACTED, "< Authorization: Bearer " + REDACTED, "> api-key: " + REDACTED,
                     "< Upgrade: websocket"]


def test_the_redactor_cleans_text_and_binary_frames_and_forgets_a_discarded_secret() -> None:
    redactor = Redactor(["short", PROVIDER_KEY, f"{PROVIDER_KEY}-longer"])
    assert redactor(f"a {PROVIDER_KEY}-longer b {PROVIDER_KEY}") == f"a {REDACTED} b {REDACTED}"
    assert redactor.frame(f'{{"k": "{PROVIDER_KEY}"}}'.encode()) == f'{{"k": "{REDACTED}"}}'.encode()
    redactor.discard("short")
    assert redactor.frame("short") == "short"
