"""OpenTelemetry traces of the relay's sessions: the optional `relay[otel]` extra.

One trace per session, continuing the client's when its handshake carries a W3C `traceparent`
(a header, or a query parameter of that name, with `tracestate` beside it):

    relay.session              SERVER    the session, from the client's handshake to its end
      relay.response           INTERNAL  a response of the model, created -> done
        execute_tool NAME      INTERNAL  a relay tool call: its handler starts -> its output is
                                         sent (GenAI semantic conventions); the handler runs
                                         inside it, so the user's own instrumented calls nest
          relay.filler         INTERNAL  what the relay had said while it ran: create -> done
      relay.follow_up          INTERNAL  the relay's response.create after the outputs -> its
                                         response done; linked to the calls it speaks about

The spans are built from what the engine already tells its edge (notices, see
`relay.engine.Notice`) and from the runner (`SessionTrace.handler_scope`): no frame is looked
at. Nothing here imports opentelemetry until tracing is on. `tracing_for` decides: a tracer
provider given in the configuration; else the application's global one, if it set one (e.g.
`opentelemetry-instrument relay serve`); else one made from the standard OTEL_* variables when
they ask for an exporter (OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_ENDPOINT, ...); else None,
and then no session has a trace and nothing pays for one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections import OrderedDict
from typing import Any, Iterator, Mapping

from relay import __version__
from relay.engine import Notice
from relay.engine.actions import TOOL_CALL
from relay.engine.calls import CallOutcome

log = logging.getLogger("relay.tracing")

TRACE_PARAMS = ("traceparent", "tracestate")
"""Handshake query parameters (and headers) that carry the client's trace context; the relay
does not pass them on to the provider."""
INSTRUMENTATION = "relay"
SERVICE_NAME = "realtime-relay"
FLUSH_MS = 5000
_REMEMBERED = 128   # ended response and call spans kept as parents and links, per session
# gen_ai.provider.name by dialect (the GenAI conventions' well-known values)
PROVIDERS = {"openai": "openai", "openai-beta": "openai", "azure": "azure.ai.openai",
             "azure-preview": "azure.ai.openai", "foundry": "azure.ai.openai", "gemini": "gcp.gemini"}

_provider_from_environment: Any = None   # made once per process (a forked worker makes its own)


def exporter_configured(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the OTEL_* variables ask for traces to be exported somewhere."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = environ.get("OTEL_TRACES_EXPORTER")
    if exporters is not None:
        return exporters.strip().lower() not in ("", "none")
    return bool(environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def tracing_for(provider: Any = None) -> Tracing | None:
    """The tracing of an edge's sessions, or None (see the module's docstring for the order)."""
    if provider is not None:
        return Tracing(provider.get_tracer(INSTRUMENTATION, __version__))
    if "opentelemetry.trace" in sys.modules:   # imported already: asking costs nothing
        from opentelemetry import trace

        current = trace.get_tracer_provider()
        if not isinstance(current, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
            return Tracing(current.get_tracer(INSTRUMENTATION, __version__))
    if not exporter_configured():
        return None
    try:
        made = _environment_provider()
    except ImportError as exc:
        log.warning("OTEL_* variables ask for traces, but %s: install the otel extra "
                    "(pip install 'realtime-relay[otel]'); no traces", exc)
        return None
    return Tracing(made.get_tracer(INSTRUMENTATION, __version__), owned=made)


def _environment_provider() -> Any:
    """A TracerProvider as the OTEL_* variables describe it, set as the global one (so that the
    user's instrumented code in tools reports to the same place): the resource from
    OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES (service.name `realtime-relay` when neither names
    one), the sampler from OTEL_TRACES_SAMPLER, batching from OTEL_BSP_*, and each exporter of
    OTEL_TRACES_EXPORTER (default otlp; `console` too), the OTLP one over
    OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL (http/protobuf by default, grpc if its package is
    installed) reading its own OTEL_EXPORTER_OTLP_* settings."""
    global _provider_from_environment
    if _provider_from_environment is not None:
        return _provider_from_environment
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": SERVICE_NAME}))
    provider = TracerProvider(resource=resource)
    for exporter in _exporters():
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    _provider_from_environment = provider
    return provider


def _exporters() -> list[Any]:
    exporters = []
    for name in (os.environ.get("OTEL_TRACES_EXPORTER") or "otlp").split(","):
        name = name.strip().lower()
        if name == "otlp":
            protocol = (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf").strip()
            if protocol == "grpc":
                from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                    OTLPSpanExporter,
                )
            elif protocol == "http/protobuf":
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[assignment]
                    OTLPSpanExporter,
                )
            else:
                log.warning("OTLP protocol %r is not supported; use http/protobuf or grpc", protocol)
                continue
            exporters.append(OTLPSpanExporter())
        elif name == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            exporters.append(ConsoleSpanExporter())
        elif name and name != "none":
            log.warning("trace exporter %r is not supported; use otlp or console", name)
    return exporters


def trace_carrier(headers: Any, query: list[tuple[str, str]]) -> dict[str, str]:
    """The client's trace context from its handshake: the headers, else the query parameters."""
    carrier: dict[str, str] = {}
    for name in TRACE_PARAMS:
        value = headers.get(name)
        if value:
            carrier[name] = value
    if "traceparent" not in carrier:
        carrier.update((name, value) for name, value in query if name in TRACE_PARAMS and value)
    return carrier


class Tracing:
    """The tracer of an edge's sessions, and the provider it made (flushed when the edge stops)."""

    def __init__(self, tracer: Any, *, owned: Any = None) -> None:
        self.tracer = tracer
        self._owned = owned

    def session(self, *, session_id: str, mode: str, dialect: str, upstream: str,
                carrier: Mapping[str, str] | None = None, **attributes: Any) -> SessionTrace:
        return SessionTrace(self.tracer, session_id=session_id, mode=mode, dialect=dialect,
                            upstream=upstream, carrier=carrier or {}, attributes=attributes)

    def flush(self) -> None:
        """Export what is still batched (a worker process ends without atexit handlers), for at
        most FLUSH_MS: an unreachable collector must not hold up a stop for long."""
        if self._owned is not None:
            self._owned.force_flush(FLUSH_MS)


class SessionTrace:
    """One session's spans. The edge hands it every engine notice (`notice`), the runner runs
    each handler in `handler_scope`, and the edge ends it (`end`)."""

    def __init__(self, tracer: Any, *, session_id: str, mode: str, dialect: str, upstream: str,
                 carrier: Mapping[str, str], attributes: Mapping[str, Any]) -> None:
        from opentelemetry import context, propagate, trace

        self._tracer = tracer
        self._trace = trace
        self._context = context
        host, _, port = upstream.rpartition(":")
        fields = {"relay.session.id": session_id, "relay.mode": mode, "relay.dialect": dialect,
                  "gen_ai.provider.name": PROVIDERS.get(dialect, dialect),
                  "server.address": host or upstream, "server.port": int(port) if port.isdigit() else None,
                  **attributes}
        parent = propagate.extract(dict(carrier)) if carrier else None
        self.span = tracer.start_span("relay.session", context=parent, kind=trace.SpanKind.SERVER,
                                      attributes=_clean(fields))
        self._in_session = trace.set_span_in_context(self.span)
        self._responses: dict[str, Any] = {}            # open response spans by response id
        self._creates: dict[str, Any] = {}              # follow-up/filler spans by event id, until created
        self._calls: dict[str, Any] = {}                # open tool call spans by call id
        self._ended_responses: OrderedDict[str, Any] = OrderedDict()   # response id -> span (parents)
        self._ended_calls: OrderedDict[str, Any] = OrderedDict()       # call id -> span context (links)
        self.ended = False

    # ---- the engine's notices ----------------------------------------------------------------
    def notice(self, notice: Notice) -> None:
        handler = self._HANDLERS.get(notice.kind)
        if handler is not None and not self.ended:
            handler(self, notice.fields)

    def _on_response(self, fields: dict[str, Any]) -> None:
        response_id = fields.get("response_id")
        if fields.get("phase") == "created":
            span = self._creates.pop(fields.get("event_id") or "", None)
            if span is None:
                span = self._tracer.start_span("relay.response", context=self._in_session)
            span.set_attributes(_clean({"gen_ai.response.id": response_id,
                                        "relay.response.creator": fields.get("creator")}))
            self._responses[response_id] = span
            return
        span = self._responses.pop(response_id, None)
        if span is None:
            return
        span.set_attributes(_clean({"relay.response.status": fields.get("status"),
                                    "relay.response.reason": fields.get("reason")}))
        if fields.get("status") == "failed":
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, "response failed"))
        span.end()
        self._remember(self._ended_responses, response_id, span)

    def _on_create(self, kind: str, fields: dict[str, Any]) -> None:
        """A follow-up or filler `response.create` went up: its span lasts until its response is
        done (a create sent again keeps its span)."""
        event_id = fields.get("event_id") or ""
        call_ids = [c for c in str(fields.get("call_ids") or "").split(",") if c]
        if event_id in self._creates:
            self._creates[event_id].add_event("relay.create_sent_again")
            return
        parent = self._in_session
        if kind == "filler" and call_ids and call_ids[0] in self._calls:
            parent = self._trace.set_span_in_context(self._calls[call_ids[0]])
        links = [self._trace.Link(context) for context in
                 (self._ended_calls.get(call_id) or _context_of(self._calls.get(call_id)) for call_id in call_ids)
                 if context is not None]
        self._creates[event_id] = self._tracer.start_span(
            f"relay.{kind}", context=parent, links=links,
            attributes=_clean({"relay.event_id": event_id, "relay.call_ids": call_ids}))

    def _on_follow_up(self, fields: dict[str, Any]) -> None:
        self._on_create("follow_up", fields)

    def _on_filler(self, fields: dict[str, Any]) -> None:
        self._on_create("filler", fields)

    def _on_tool_started(self, fields: dict[str, Any]) -> None:
        call_id = fields.get("call_id")
        if isinstance(call_id, str) and call_id not in self._calls:
            self._calls[call_id] = self._start_call(call_id, fields.get("name"), fields.get("response_id"))

    def _start_call(self, call_id: str, name: Any, response_id: Any) -> Any:
        response = self._responses.get(response_id) or self._ended_responses.get(response_id)
        parent = self._trace.set_span_in_context(response) if response is not None else self._in_session
        return self._tracer.start_span(f"execute_tool {name}", context=parent, attributes=_clean({
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": "function", "gen_ai.response.id": response_id}))

    def _on_tool_call(self, fields: dict[str, Any]) -> None:
        """A relay call is settled (answered, skipped, abandoned): its span ends. A call that
        never ran (an unknown tool, bad arguments) gets its span here."""
        call_id = fields.get("call_id")
        if not isinstance(call_id, str):
            return
        span = self._calls.pop(call_id, None)
        if span is None:
            span = self._start_call(call_id, fields.get("name"), fields.get("response_id"))
        outcome = fields.get("outcome")
        span.set_attributes(_clean({
            "relay.tool.outcome": None if outcome is None else str(outcome), "relay.tool.status": fields.get("status"),
            "relay.tool.output_item_id": fields.get("output_item_id"),
            "relay.tool.handler_ms": fields.get("handler_ms"), "relay.tool.latency_ms": fields.get("ms"),
            "relay.tool.reason": fields.get("reason")}))
        if CallOutcome.means_failure(outcome):
            span.set_attribute("error.type", str(outcome))
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, str(outcome)))
        span.end()
        self._remember(self._ended_calls, call_id, span.get_span_context())

    def _on_problem(self, kind: str, fields: dict[str, Any]) -> None:
        self.span.add_event(f"relay.{kind}", _clean({
            "relay.code": _text(fields.get("code")), "relay.message": _text(fields.get("message")),
            "relay.call.id": fields.get("call_id"), "relay.source": fields.get("source")}))

    _HANDLERS: dict[str, Any] = {
        "response": _on_response,
        "follow_up": _on_follow_up,
        "filler": _on_filler,
        "tool_started": _on_tool_started,
        TOOL_CALL: _on_tool_call,
        "upstream_error": lambda self, fields: self._on_problem("upstream_error", fields),
        "anomaly": lambda self, fields: self._on_problem("anomaly", fields),
    }

    # ---- handlers -----------------------------------------------------------------------------
    @contextlib.contextmanager
    def handler_scope(self, call_id: str) -> Iterator[None]:
        """Run a handler with its call's span as the current span: in the handler's task (async),
        and in its worker thread (sync; anyio copies the context there). What it raises is
        recorded on the span."""
        span = self._calls.get(call_id)
        if span is None:
            yield
            return
        token = self._context.attach(self._trace.set_span_in_context(span))
        try:
            yield
        except Exception as exc:
            span.record_exception(exc)
            raise
        finally:
            self._context.detach(token)

    # ---- the end ------------------------------------------------------------------------------
    def end(self, *, by: str, code: int, reason: str, failed: bool, tool_calls: int | None = None) -> None:
        """The session is over: what is still open ends with it, then the session's span (an
        error when the session `failed`: the edge asks relay.session.policy)."""
        if self.ended:
            return
        self.ended = True
        for span in [*self._calls.values(), *self._creates.values(), *self._responses.values()]:
            span.set_attribute("relay.ended_with_session", True)
            span.end()
        self._calls.clear()
        self._creates.clear()
        self._responses.clear()
        self.span.set_attributes(_clean({"relay.session.ended_by": by, "relay.session.close_code": code,
                                         "relay.session.close_reason": reason, "relay.tool_calls": tool_calls}))
        if failed:
            self.span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, f"{by} closed: {code} {reason}"))
        self.span.end()

    @staticmethod
    def _remember(book: OrderedDict[str, Any], key: Any, value: Any) -> None:
        if isinstance(key, str):
            book[key] = value
            while len(book) > _REMEMBERED:
                book.popitem(last=False)


def _context_of(span: Any) -> Any:
    return span.get_span_context() if span is not None else None


def _text(value: Any) -> str | None:
    return None if value is None else str(value)[:256]


def _clean(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """Attributes without the unset ones (OpenTelemetry takes no None)."""
    return {key: value for key, value in attributes.items() if value is not None and value != []}
