"""Process-wide counters for `relay serve`, rendered in the Prometheus text format (version 0.0.4).

Frame counting is on the per-frame path, so it is two dictionary integer adds per frame
(`TrafficTap`); everything else is counted per session or per tool call. One `Metrics` object
belongs to one server; it holds totals only, never session state.
"""

from __future__ import annotations

import bisect
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Container

from relay.engine import Notice
from relay.recording import DIRECTIONS, RecordingWriter

log = logging.getLogger("relay.metrics")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Tool latency buckets, in seconds: from a fast lookup to a slow API call.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_MAX_LABEL_CHARS = 64
UNKNOWN_TOOL_LABEL = "(unknown)"


@dataclass
class Histogram:
    """Cumulative-bucket histogram: `counts[i]` observations <= `bounds[i]`, kept non-cumulative
    and summed when rendered."""

    bounds: tuple[float, ...] = LATENCY_BUCKETS
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1


@dataclass
class Metrics:
    sessions_total: int = 0
    sessions_ended: Counter[str] = field(default_factory=Counter)           # by who closed
    handshakes_refused: Counter[int] = field(default_factory=Counter)       # by HTTP status
    frames: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DIRECTIONS, 0))
    frame_bytes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DIRECTIONS, 0))
    tool_calls: Counter[tuple[str, str]] = field(default_factory=Counter)   # (tool, outcome)
    tool_latency: dict[str, Histogram] = field(default_factory=dict)
    follow_ups: int = 0
    fillers: int = 0
    errors: Counter[tuple[str, str]] = field(default_factory=Counter)       # (source, code)
    anomalies: Counter[str] = field(default_factory=Counter)                # by source

    def count_notice(self, notice: Notice, tool_names: Container[str]) -> None:
        """Count what an engine notice reports. `tool_names` are the relay's tools: any other
        name (a model's invention) is one label, so labels stay bounded."""
        fields = notice.fields
        kind = notice.kind
        if kind == "tool_call":
            tool = fields.get("name")
            tool = tool if tool in tool_names else UNKNOWN_TOOL_LABEL
            self.tool_calls[(tool, str(fields.get("outcome")))] += 1
            if fields.get("ms") is not None:
                self.tool_latency.setdefault(tool, Histogram()).observe(fields["ms"] / 1000.0)
        elif kind == "follow_up":
            self.follow_ups += 1
        elif kind == "filler":
            self.fillers += 1
        elif kind == "client_error":
            self.count_error("relay", fields.get("code"))
        elif kind == "upstream_error":
            self.count_error("upstream", fields.get("code"))
        elif kind == "anomaly":
            self.anomalies[str(fields.get("source"))] += 1

    def count_error(self, source: str, code: Any) -> None:
        self.errors[(source, str(code or "unknown")[:_MAX_LABEL_CHARS])] += 1

    def render(self, *, open_sessions: int) -> str:
        """The exposition text."""
        out = _Exposition()
        out.family("relay_sessions_open", "gauge", "Client sessions open now.")
        out.sample("relay_sessions_open", {}, open_sessions)
        out.family("relay_sessions_total", "counter", "Client sessions accepted.")
        out.sample("relay_sessions_total", {}, self.sessions_total)
        out.family("relay_sessions_ended_total", "counter", "Sessions ended, by the side that ended them.")
        for by, count in sorted(self.sessions_ended.items()):
            out.sample("relay_sessions_ended_total", {"by": by}, count)
        out.family("relay_handshakes_refused_total", "counter", "WebSocket handshakes refused, by HTTP status.")
        for status, count in sorted(self.handshakes_refused.items()):
            out.sample("relay_handshakes_refused_total", {"status": str(status)}, count)
        out.family("relay_frames_total", "counter", "WebSocket frames, by direction.")
        for direction, count in self.frames.items():
            out.sample("relay_frames_total", {"direction": direction}, count)
        out.family("relay_frame_bytes_total", "counter",
                   "Frame payload sizes, by direction (characters of text frames: bytes for ASCII JSON).")
        for direction, count in self.frame_bytes.items():
            out.sample("relay_frame_bytes_total", {"direction": direction}, count)
        out.family("relay_tool_calls_total", "counter", "Relay tool calls answered or settled, by tool and outcome.")
        for (tool, outcome), count in sorted(self.tool_calls.items()):
            out.sample("relay_tool_calls_total", {"tool": tool, "outcome": outcome}, count)
        out.family("relay_tool_call_seconds", "histogram",
                   "From a call being ready to its output being sent upstream.")
        for tool, histogram in sorted(self.tool_latency.items()):
            cumulative = 0
            for bound, count in zip((*histogram.bounds, float("inf")), histogram.counts):
                cumulative += count
                out.sample("relay_tool_call_seconds_bucket", {"tool": tool, "le": _number(bound)}, cumulative)
            out.sample("relay_tool_call_seconds_sum", {"tool": tool}, histogram.total)
            out.sample("relay_tool_call_seconds_count", {"tool": tool}, histogram.count)
        out.family("relay_follow_ups_total", "counter", "response.create events the relay sent after tool outputs.")
        out.sample("relay_follow_ups_total", {}, self.follow_ups)
        out.family("relay_fillers_total", "counter", "Spoken filler responses the relay requested while tools ran.")
        out.sample("relay_fillers_total", {}, self.fillers)
        out.family("relay_errors_total", "counter",
                   "Errors by code: sent to clients by the relay (source=relay) or aimed at the relay "
                   "by the upstream (source=upstream).")
        for (source, code), count in sorted(self.errors.items()):
            out.sample("relay_errors_total", {"source": source, "code": code}, count)
        out.family("relay_anomalies_total", "counter", "Protocol anomalies the engine recorded, by source.")
        for source, count in sorted(self.anomalies.items()):
            out.sample("relay_anomalies_total", {"source": source}, count)
        return out.text()


class _Exposition:
    def __init__(self) -> None:
        self._lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str) -> None:
        self._lines.append(f"# HELP {name} {help_text}")
        self._lines.append(f"# TYPE {name} {kind}")

    def sample(self, name: str, labels: dict[str, str], value: float) -> None:
        if labels:
            body = ",".join(f'{key}="{_escape(value)}"' for key, value in labels.items())
            name = f"{name}{{{body}}}"
        self._lines.append(f"{name} {_number(value)}")

    def text(self) -> str:
        return "\n".join(self._lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if value == float("inf"):
        return "+Inf"
    if isinstance(value, int) or float(value).is_integer():
        return str(int(value))
    return repr(float(value))


class TrafficTap:
    """The session loop's recorder: counts each frame into the server's metrics and passes it to
    the session's recording, if any. A recording that fails is dropped, never the session."""

    __slots__ = ("frames", "frame_bytes", "writer")

    def __init__(self, metrics: Metrics, writer: RecordingWriter | None) -> None:
        self.frames = metrics.frames
        self.frame_bytes = metrics.frame_bytes
        self.writer = writer

    def record(self, direction: str, frame: str | bytes) -> None:
        self.frames[direction] += 1
        self.frame_bytes[direction] += len(frame)
        if self.writer is not None:
            try:
                self.writer.record(direction, frame)
            except Exception:
                log.exception("session recording failed; recording stopped")
                self.writer = None

    def record_notice(self, kind: str, fields: dict[str, Any]) -> None:
        """What the engine decided about a tool call, for the recording beside the frames."""
        if self.writer is not None:
            try:
                self.writer.record_notice(kind, fields)
            except Exception:
                log.exception("session recording failed; recording stopped")
                self.writer = None

    def close(self, reason: str) -> None:
        if self.writer is not None:
            try:
                self.writer.close(reason)
            except Exception:
                log.exception("closing the session recording failed")
            self.writer = None
