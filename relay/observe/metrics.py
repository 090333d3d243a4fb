"""`relay serve`'s Prometheus metrics, kept with prometheus-client.

One process: the metrics live in a registry of the server's own. Several (`relay serve --workers
N`): prometheus-client's multiprocess mode. Every worker writes its values to files in one
directory (`PROMETHEUS_MULTIPROC_DIR`: the user's, or one the parent makes for the run and removes
after it, see `metrics_for_workers`), and the worker that answers a scrape reads them all:

- counters and histograms are summed over the workers (a worker that has exited still counts);
- `relay_sessions_open` is summed over the live workers (`livesum`: an exited worker holds no
  session), which is what "sessions open on this port" means;
- `relay_worker_sessions_open{pid}` gives the same per live worker (`liveall`), because the sum
  hides how the kernel spread the sessions, and a max or min would say nothing true. `/healthz`
  reads it too (`open_sessions_by_worker`).

Frames are on the per-frame path: the session's `TrafficTap` counts them as plain integer adds
and publishes them in batches (every `PUBLISH_EVERY` frames of a session, when it ends, and before
this worker answers a scrape), since one prometheus-client increment costs more than the rest of
the relay's own work on a frame (scripts/bench_metrics.py measures both). Everything else is counted as it
happens (per session, handshake, tool call, response.create).

prometheus-client is imported when a `Metrics` first counts or renders, never at import:
the library chooses between one process and several when it is imported, so `relay serve
--workers` sets the directory first.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import shutil
import tempfile
import weakref
from collections import Counter
from typing import Any, Callable, Container, Iterator

from relay.engine import Notice
from relay.engine.actions import TOOL_CALL
from relay.errors import UnusableInput
from relay.recording.format import DIRECTIONS
from relay.recording.taps import ForwardLane

log = logging.getLogger("relay.metrics")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MULTIPROC_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
# Tool latency buckets, in seconds: from a fast lookup to a slow API call.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# A session's frame counts go to the shared counters after this many frames (and at its end).
PUBLISH_EVERY = 256
_MAX_LABEL_CHARS = 64
UNKNOWN_TOOL_LABEL = "(unknown)"
WORKER_SESSIONS = "relay_worker_sessions_open"


class _Families:
    """The prometheus-client metric objects of one `Metrics`, made in the process that counts."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Gauge, Histogram, values
        from prometheus_client import Counter as PromCounter

        directory = os.environ.get(MULTIPROC_DIR_ENV)
        self.multiprocess = bool(directory) and values.ValueClass is not values.MutexValue
        if directory and not self.multiprocess:
            log.warning("prometheus_client was imported before %s was set: /metrics shows this process "
                        "only", MULTIPROC_DIR_ENV)
        self.directory = directory if self.multiprocess else None
        # one process: the metrics register here; several: they write files, and the registry
        # that renders reads every worker's
        self.registry = CollectorRegistry(auto_describe=True)
        own = None if self.multiprocess else self.registry
        if self.multiprocess:
            self.registry.register(_WorkerFiles(directory))

        self.sessions_open = Gauge("relay_sessions_open", "Client sessions open now (all workers).",
                                   registry=own, multiprocess_mode="livesum")
        if self.multiprocess:   # the collector adds the pid label
            self.worker_sessions_open = Gauge(WORKER_SESSIONS, "Client sessions open now, per worker process.",
                                              registry=None, multiprocess_mode="liveall")
        else:
            self.worker_sessions_open = Gauge(WORKER_SESSIONS, "Client sessions open now, per worker process.",
                                              ["pid"], registry=own).labels(pid=str(os.getpid()))
        self.sessions = PromCounter("relay_sessions", "Client sessions accepted.", registry=own)
        self.sessions_ended = PromCounter("relay_sessions_ended", "Sessions ended, by the side that ended them.",
                                          ["by"], registry=own)
        self.handshakes_refused = PromCounter("relay_handshakes_refused",
                                              "WebSocket handshakes refused, by HTTP status.", ["status"],
                                              registry=own)
        frames = PromCounter("relay_frames", "WebSocket frames, by direction.", ["direction"], registry=own)
        frame_bytes = PromCounter("relay_frame_bytes",
                                  "Frame payload sizes, by direction (characters of text frames: bytes "
                                  "for ASCII JSON).", ["direction"], registry=own)
        self.frames_family, self.frame_bytes_family = frames, frame_bytes
        self.frames = {direction: frames.labels(direction=direction) for direction in DIRECTIONS}
        self.frame_bytes = {direction: frame_bytes.labels(direction=direction) for direction in DIRECTIONS}
        self.tool_calls = PromCounter("relay_tool_calls", "Relay tool calls answered or settled, by tool and "
                                      "outcome.", ["tool", "outcome"], registry=own)
        self.tool_seconds = Histogram("relay_tool_call_seconds",
                                      "From a call being ready to its output being sent upstream.", ["tool"],
                                      buckets=LATENCY_BUCKETS, registry=own)
        self.follow_ups = PromCounter("relay_follow_ups", "response.create events the relay sent after "
                                      "tool outputs.", registry=own)
        self.fillers = PromCounter("relay_fillers", "Spoken filler responses the relay requested while "
                                   "tools ran.", registry=own)
        self.errors = PromCounter("relay_errors", "Errors by code: sent to clients by the relay "
                                  "(source=relay) or aimed at the relay by the upstream (source=upstream).",
                                  ["source", "code"], registry=own)
        self.mcp_events = PromCounter("relay_mcp_events", "MCP server connections: connected, reconnected, "
                                      "lost, connect_failed, tools_changed, by server.", ["server", "event"],
                                      registry=own)
        self.anomalies = PromCounter("relay_anomalies", "Protocol anomalies the engine recorded, by source.",
                                     ["source"], registry=own)
        self.store_events = PromCounter("relay_store_events", "The call store: degraded (unreachable, failing "
                                        "or slow: sessions run on what the process holds), recovered, "
                                        "write_failed, skipped (a record not written while degraded).",
                                        ["event"], registry=own)
        self.store_writes = Histogram("relay_store_write_seconds", "How long the call store took to keep a "
                                      "record written ahead (what a guarded action waited).",
                                      buckets=LATENCY_BUCKETS, registry=own)
        self.handovers = PromCounter("relay_handovers", "Attached calls that changed replica: takeover (an "
                                     "expired or offered lease taken), handoff (offered on a drain and taken "
                                     "by a peer), lease_lost (taken from this replica).", ["kind"], registry=own)
        self.taken_over_calls = PromCounter("relay_calls_after_takeover", "Owed calls a takeover finished: "
                                            "retried (run again: not started, idempotent or keyed), refused "
                                            "(answered 'interrupted; not retried'), answered (the decided "
                                            "output sent), followed_up (answered already, the follow-up the "
                                            "old owner owed asked for).", ["fate"], registry=own)
        self.resumes = PromCounter("relay_resumes", "Resumable proxied sessions (with a store): issued (a "
                                   "resume token handed out), resumed (a client reconnected with one), "
                                   "refused_<code> (resume_token_invalid, resume_token_in_use, "
                                   "store_unavailable, resume_not_supported).", ["result"], registry=own)
        self.loop_blocks = PromCounter("relay_tool_loop_blocks", "Steps of async tool handlers that held the "
                                       "event loop (every session of the process) too long, by tool.", ["tool"],
                                       registry=own)


class _WorkerFiles:
    """Every worker's metrics from the files in `directory`, merged as prometheus-client's
    MultiProcessCollector merges them, less the files that are still empty.

    prometheus-client creates a worker's file and sizes it a moment later; a reader that opens it
    in between fails with struct.error (prometheus/client_python#1199, open), and so would the
    whole scrape, or a worker starting beside another (its registry collects once as it
    registers). A worker killed in that moment leaves the empty file for good. An empty file holds
    no values yet: leaving it out loses nothing."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def collect(self) -> Any:
        from prometheus_client.multiprocess import MultiProcessCollector

        return MultiProcessCollector.merge(_worker_files(self.directory, "*.db"), accumulate=True)


def _worker_files(directory: str, pattern: str) -> list[str]:
    """The files of `directory` matching `pattern` that are not empty (see _WorkerFiles)."""
    files = []
    for path in glob.glob(os.path.join(directory, pattern)):
        try:
            if os.stat(path).st_size > 0:
                files.append(path)
        except FileNotFoundError:   # a live gauge's file, removed as its worker exited
            pass
    return files


class Metrics:
    """One server's metrics. Counting methods for the edges; `render` for `/metrics`;
    `open_sessions_by_worker` for `/healthz`; and read-only views of what this process counted
    (`sessions_total`, `tool_calls`, ...), as plain numbers and Counters, for logs and tests."""

    def __init__(self) -> None:
        self._made: _Families | None = None
        self._taps: weakref.WeakSet[TrafficTap] = weakref.WeakSet()

    @property
    def _families(self) -> _Families:
        if self._made is None:
            self._made = _Families()
        return self._made

    def ready(self) -> None:
        """Make the metrics now, in the process that serves (a worker, after the fork), so that
        it is listed (`relay_worker_sessions_open`, `/healthz`) before its first session."""
        self._families

    # ---- counting ------------------------------------------------------------------------
    def session_started(self) -> None:
        families = self._families
        families.sessions.inc()
        families.sessions_open.inc()
        families.worker_sessions_open.inc()

    def session_ended(self, by: str) -> None:
        families = self._families
        families.sessions_ended.labels(by=by).inc()
        families.sessions_open.dec()
        families.worker_sessions_open.dec()

    def handshake_refused(self, status: int) -> None:
        self._families.handshakes_refused.labels(status=str(status)).inc()

    def count_notice(self, notice: Notice, tool_names: Container[str]) -> None:
        """Count what an engine notice reports. `tool_names` are the relay's tools: any other
        name (a model's invention) is one label, so labels stay bounded."""
        fields = notice.fields
        kind = notice.kind
        if kind == TOOL_CALL:
            tool = fields.get("name")
            tool = tool if tool in tool_names else UNKNOWN_TOOL_LABEL
            families = self._families
            families.tool_calls.labels(tool=tool, outcome=str(fields.get("outcome"))).inc()
            if fields.get("ms") is not None:
                families.tool_seconds.labels(tool=tool).observe(fields["ms"] / 1000.0)
        elif kind == "follow_up":
            self._families.follow_ups.inc()
        elif kind == "filler":
            self._families.fillers.inc()
        elif kind == "client_error":
            self.count_error("relay", fields.get("code"))
        elif kind == "upstream_error":
            self.count_error("upstream", fields.get("code"))
        elif kind == "anomaly":
            self._families.anomalies.labels(source=str(fields.get("source"))).inc()
        elif kind == "loop_blocked":
            tool = fields.get("name")
            self._families.loop_blocks.labels(tool=tool if tool in tool_names else UNKNOWN_TOOL_LABEL).inc()

    def count_mcp(self, server: str, event: str, detail: str = "") -> None:
        """An MCP server's connection event (relay.mcp.connection: a listener of the edge's)."""
        self._families.mcp_events.labels(server=server[:_MAX_LABEL_CHARS], event=event).inc()

    def count_store(self, event: str) -> None:
        """The call store's event (relay.store.writeahead: a listener of the edge's)."""
        self._families.store_events.labels(event=event[:_MAX_LABEL_CHARS]).inc()

    def observe_store_write(self, seconds: float) -> None:
        self._families.store_writes.observe(seconds)

    def count_handover(self, kind: str, count: int = 1) -> None:
        """An attached call that changed replica (`takeover`, `handoff`, `lease_lost`), or, with
        `calls_` before the fate, the owed calls a takeover finished that way."""
        if kind.startswith("calls_"):
            self._families.taken_over_calls.labels(fate=kind[6:]).inc(count)
        else:
            self._families.handovers.labels(kind=kind).inc(count)

    def count_resume(self, result: str) -> None:
        """A resume token issued, a session resumed, or a resume refused (relay.edges.resume)."""
        self._families.resumes.labels(result=result[:_MAX_LABEL_CHARS]).inc()

    def count_error(self, source: str, code: Any) -> None:
        self._families.errors.labels(source=source, code=str(code or "unknown")[:_MAX_LABEL_CHARS]).inc()

    def count_frame(self, direction: str, frame: str | bytes) -> None:
        """A frame sent outside a session loop (the error before a session could start)."""
        families = self._families
        families.frames[direction].inc()
        families.frame_bytes[direction].inc(len(frame))

    def tap(self) -> TrafficTap:
        """A session's frame counter: see `TrafficTap`."""
        return TrafficTap(self)

    def publish_frames(self, frames: dict[str, int], frame_bytes: dict[str, int]) -> None:
        families = self._families
        for direction, count in frames.items():
            if count:
                families.frames[direction].inc(count)
                families.frame_bytes[direction].inc(frame_bytes[direction])

    def publish_open_taps(self) -> None:
        """What the open sessions of this process counted since they last published."""
        for tap in list(self._taps):
            tap.publish()

    # ---- reading -------------------------------------------------------------------------
    def render(self) -> str:
        """The exposition text: this process's metrics, or with several workers every worker's
        (this one's frames published first)."""
        from prometheus_client import generate_latest

        self.publish_open_taps()
        return generate_latest(_WithoutCreated(self._families.registry)).decode("utf-8")

    def open_sessions_by_worker(self) -> dict[int, int]:
        """Open sessions by worker pid: every live worker's with several, else this process's."""
        families = self._families
        if not families.multiprocess:
            return {os.getpid(): int(_value(families.sessions_open, "relay_sessions_open"))}
        from prometheus_client.multiprocess import MultiProcessCollector

        assert families.directory is not None
        by_worker: dict[int, int] = {}
        files = _worker_files(families.directory, "gauge_liveall_*.db")
        for metric in MultiProcessCollector.merge(files, accumulate=False):
            if metric.name == WORKER_SESSIONS:
                for sample in metric.samples:
                    by_worker[int(sample.labels["pid"])] = int(sample.value)
        by_worker.setdefault(os.getpid(), 0)
        return dict(sorted(by_worker.items()))

    def _own(self, family: str, *keys: str) -> Counter[Any]:
        """This process's non-zero samples of a labelled counter, keyed by label values."""
        counts: Counter[Any] = Counter()
        for metric in getattr(self._families, family).collect():
            for sample in metric.samples:
                if sample.name.endswith("_total") and sample.value:
                    key = tuple(sample.labels[k] for k in keys)
                    counts[key[0] if len(keys) == 1 else key] += int(sample.value)
        return counts

    @property
    def sessions_total(self) -> int:
        return int(_value(self._families.sessions, "relay_sessions_total"))

    @property
    def follow_ups(self) -> int:
        return int(_value(self._families.follow_ups, "relay_follow_ups_total"))

    @property
    def fillers(self) -> int:
        return int(_value(self._families.fillers, "relay_fillers_total"))

    @property
    def sessions_ended(self) -> Counter[str]:
        return self._own("sessions_ended", "by")

    @property
    def handshakes_refused(self) -> Counter[int]:
        return Counter({int(status): count for status, count in self._own("handshakes_refused", "status").items()})

    @property
    def tool_calls(self) -> Counter[tuple[str, str]]:
        return self._own("tool_calls", "tool", "outcome")

    @property
    def errors(self) -> Counter[tuple[str, str]]:
        return self._own("errors", "source", "code")

    @property
    def mcp_events(self) -> Counter[tuple[str, str]]:
        return self._own("mcp_events", "server", "event")

    @property
    def anomalies(self) -> Counter[str]:
        return self._own("anomalies", "source")

    @property
    def store_events(self) -> Counter[str]:
        return self._own("store_events", "event")

    @property
    def resumes(self) -> Counter[str]:
        return self._own("resumes", "result")

    @property
    def loop_blocks(self) -> Counter[str]:
        return self._own("loop_blocks", "tool")

    @property
    def frames(self) -> dict[str, int]:
        self.publish_open_taps()
        counted = self._own("frames_family", "direction")
        return {direction: counted[direction] for direction in DIRECTIONS}

    @property
    def frame_bytes(self) -> dict[str, int]:
        self.publish_open_taps()
        counted = self._own("frame_bytes_family", "direction")
        return {direction: counted[direction] for direction in DIRECTIONS}


class _WithoutCreated:
    """A registry's metrics without the `_created` samples prometheus-client adds to counters and
    histograms in one process (several workers have none): the same names either way, those the
    metrics page (docs/observability.md) lists, without a process-wide switch in a library."""

    def __init__(self, registry: Any) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Any]:
        for metric in self.registry.collect():
            metric.samples = [sample for sample in metric.samples if not sample.name.endswith("_created")]
            yield metric


def _value(metric: Any, sample_name: str) -> float:
    """The value of an unlabelled metric's sample, as this process counted it."""
    for family in metric.collect():
        for sample in family.samples:
            if sample.name == sample_name:
                return float(sample.value)
    return 0.0


class TrafficTap:
    """A session's frame counter, a member of its loop's recorders (relay.recording.taps.Taps):
    counts each frame (two integer adds and a countdown, no lock, no file) and publishes the
    counts to the server's metrics every `PUBLISH_EVERY` frames and at the end."""

    __slots__ = ("frames", "frame_bytes", "_metrics", "_countdown", "_lanes", "__weakref__")

    def __init__(self, metrics: Metrics) -> None:
        self.frames = dict.fromkeys(DIRECTIONS, 0)        # counted, not yet published
        self.frame_bytes = dict.fromkeys(DIRECTIONS, 0)
        self._metrics = metrics
        self._countdown = PUBLISH_EVERY
        self._lanes: list[ForwardLane] = []   # counted by the loop's express lanes, taken here
        metrics._taps.add(self)

    def adopt(self, lane: ForwardLane) -> None:
        """Count `lane`'s frames (relay.recording.taps.ForwardLane): taken when this publishes,
        which the lane asks for every PUBLISH_EVERY / 2 frames (each crosses twice)."""
        lane.settle_at = PUBLISH_EVERY // 2
        self._lanes.append(lane)

    def release(self, lane: ForwardLane) -> None:
        """No longer count `lane`; what it counted so far is kept."""
        self._take(lane)
        self._lanes.remove(lane)

    def _take(self, lane: ForwardLane) -> None:
        frames, size, resized = lane.take()
        if frames:
            self.frames[lane.received] += frames
            self.frames[lane.sent_as] += frames
            self.frame_bytes[lane.received] += size
            self.frame_bytes[lane.sent_as] += size + resized

    def record(self, direction: str, frame: str | bytes) -> None:
        self.frames[direction] += 1
        self.frame_bytes[direction] += len(frame)
        self._countdown -= 1
        if self._countdown <= 0:
            self.publish()

    def record_forwarded(self, received: str, frame: str | bytes, sent_as: str, sent: str | bytes) -> None:
        """A frame forwarded as it came: counted on both crossings in one call (the per-frame path)."""
        frames, frame_bytes = self.frames, self.frame_bytes
        frames[received] += 1
        frame_bytes[received] += len(frame)
        frames[sent_as] += 1
        frame_bytes[sent_as] += len(sent)
        self._countdown -= 2
        if self._countdown <= 0:
            self.publish()

    def publish(self) -> None:
        """Hand the counts so far to the server's metrics (shared with the other workers)."""
        for lane in self._lanes:
            self._take(lane)
        frames, frame_bytes = self.frames, self.frame_bytes
        self.frames = dict.fromkeys(DIRECTIONS, 0)
        self.frame_bytes = dict.fromkeys(DIRECTIONS, 0)
        self._countdown = PUBLISH_EVERY
        self._metrics.publish_frames(frames, frame_bytes)

    def record_notice(self, kind: str, fields: dict[str, Any]) -> None:
        """Notices are counted by `Metrics.count_notice`, from the edge's notice handler."""

    def close(self, reason: str) -> None:
        self.publish()
        self._metrics._taps.discard(self)


# ---- several worker processes -------------------------------------------------------------------

@contextlib.contextmanager
def metrics_for_workers(workers: int) -> Iterator[Callable[[int], None]]:
    """Prepare this process (before it imports prometheus-client) for `workers` processes that
    share their metrics, and yield what to call with the pid of a worker that exited.

    The metrics go to `PROMETHEUS_MULTIPROC_DIR` when the user set it (left as it is: wipe it
    between runs), else, with more than one worker, to a new temporary directory removed at the
    end; one worker and no directory: the server's own registry."""
    made: str | None = None
    directory = os.environ.get(MULTIPROC_DIR_ENV) or None
    if directory is not None:
        if not os.path.isdir(directory):
            raise UnusableInput(f"{MULTIPROC_DIR_ENV}={directory} is not a directory")
        if glob.glob(os.path.join(directory, "*.db")):
            log.warning("%s (%s) holds metrics of an earlier run: its counters are added to this run's",
                        MULTIPROC_DIR_ENV, directory)
    elif workers > 1:
        made = directory = tempfile.mkdtemp(prefix="relay-metrics-")
        os.environ[MULTIPROC_DIR_ENV] = directory

    def worker_exited(pid: int) -> None:
        if directory is not None:
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(pid, directory)

    try:
        yield worker_exited
    finally:
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
            if os.environ.get(MULTIPROC_DIR_ENV) == made:
                del os.environ[MULTIPROC_DIR_ENV]
