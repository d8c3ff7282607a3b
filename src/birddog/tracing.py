"""Optional tracing: one W3C trace from ``send`` to the reply's POST, when OpenTelemetry is there.

Install the ``otel`` extra (``birddog[otel]``, the OpenTelemetry API) and configure an
OpenTelemetry SDK as usual; BirdDog then records these spans, all in the sender's trace:

- ``birddog.enqueue`` (producer), a child of the span current where
  :func:`~birddog.enqueue_accepted_job` runs; its context is stored in
  ``jobs.traceparent``;
- ``birddog.claim``, ``birddog.handler`` and ``birddog.settle`` in the worker, children of
  the job's context; the handler runs with its span current, so the agent's own spans
  nest under it; the settlement writes the settle span's context into each reply row's
  ``outbox.traceparent``;
- ``birddog.post`` (client) in the daemon, a child of the reply row's context, whose
  context goes to the recipient in the ``traceparent`` header of the POST.

Without the extra (or without a configured SDK) nothing is recorded and nothing is
stored: OpenTelemetry is imported the first time a span could start, and a row or job
without a ``traceparent`` costs the delivery and the worker a ``None`` check, nothing more.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Link, Span, SpanKind, Tracer, TracerProvider
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACEPARENT: Final = "traceparent"
"""The W3C header (and carrier key) that holds a span's context."""

Attributes = Mapping[str, str | int]
"""Span attributes: ids and outcomes, never content."""


class _Otel:
    """The OpenTelemetry API, once imported, and the tracer BirdDog records with."""

    def __init__(self) -> None:
        from opentelemetry import trace  # noqa: PLC0415 - the optional extra, loaded once
        from opentelemetry.trace.propagation.tracecontext import (  # noqa: PLC0415
            TraceContextTextMapPropagator,
        )

        self.trace = trace
        self.kinds: dict[str, SpanKind] = {
            "producer": trace.SpanKind.PRODUCER,
            "client": trace.SpanKind.CLIENT,
            "internal": trace.SpanKind.INTERNAL,
        }
        self.propagator: TraceContextTextMapPropagator = TraceContextTextMapPropagator()
        self.provider: TracerProvider | None = None

    def tracer(self) -> Tracer:
        """BirdDog's tracer, from the configured provider (or the global one)."""
        provider = self.provider or self.trace.get_tracer_provider()
        return provider.get_tracer("birddog")

    def context_of(self, traceparent: str | None) -> Context | None:
        """The context a stored ``traceparent`` names (None: the current context)."""
        if traceparent is None:
            return None
        return self.propagator.extract({TRACEPARENT: traceparent})

    def link_to(self, traceparent: str) -> Link:
        """A link to the span a ``traceparent`` names."""
        context = self.context_of(traceparent)
        return self.trace.Link(self.trace.get_current_span(context).get_span_context())

    def traceparent_of(self, span: Span) -> str | None:
        """The W3C ``traceparent`` of ``span``, or None when it is not a valid context."""
        if not span.get_span_context().is_valid:
            return None
        carrier: dict[str, str] = {}
        self.propagator.inject(carrier, context=self.trace.set_span_in_context(span))
        return carrier.get(TRACEPARENT)


_NOT_LOADED: Final = object()
_otel: _Otel | object | None = _NOT_LOADED

_OUTGOING: ContextVar[str | None] = ContextVar("birddog_outgoing_traceparent", default=None)
"""The ``traceparent`` the current post sends (set inside the ``birddog.post`` span)."""


def _api() -> _Otel | None:
    """The OpenTelemetry API, imported on first use; None when the extra is not installed."""
    global _otel  # noqa: PLW0603 - one import attempt per process
    if _otel is _NOT_LOADED:
        try:
            _otel = _Otel()
        except ImportError:
            _otel = None
    return _otel if isinstance(_otel, _Otel) else None


def available() -> bool:
    """Whether the OpenTelemetry API is installed (the ``otel`` extra)."""
    return _api() is not None


def use_tracer_provider(provider: TracerProvider | None) -> None:
    """Record BirdDog's spans with ``provider`` instead of the global one (None: global again).

    Args:
        provider: an OpenTelemetry SDK ``TracerProvider``, or None.
    """
    otel = _api()
    if otel is not None:
        otel.provider = provider


class Traced:
    """A span BirdDog started: its W3C context, and a place for the outcome.

    Attributes:
        traceparent: the span's context as a ``traceparent`` value (None: not recorded).
    """

    __slots__ = ("_span", "traceparent")

    def __init__(self, span: Span | None = None, traceparent: str | None = None) -> None:
        self._span = span
        self.traceparent = traceparent

    def note(self, **attributes: str | int) -> None:
        """Add attributes to the span (ids and outcomes, never content)."""
        if self._span is not None:
            self._span.set_attributes(_named(attributes))


_UNTRACED: Final = Traced()


@contextlib.contextmanager
def span(
    name: str,
    *,
    parent: str | None,
    root: bool = False,
    links: Sequence[str] = (),
    kind: str = "internal",
    attributes: Attributes | None = None,
) -> Iterator[Traced]:
    """Record the span ``birddog.<name>`` around the block, current while it runs.

    Nothing is recorded (and nothing imported) when ``parent`` is None, unless ``root``
    says the span may start from the current context (the enqueue).

    Args:
        name: ``enqueue``, ``claim``, ``handler``, ``settle`` or ``post``.
        parent: the ``traceparent`` the span is a child of.
        root: start from the current context when ``parent`` is None.
        links: more ``traceparent`` values the span links to (a batch's other replies).
        kind: ``producer``, ``client`` or ``internal``.
        attributes: ids for the span, each named ``birddog.<key>``.

    Yields:
        The span's handle (its ``traceparent`` None when nothing is recorded).
    """
    otel = _api() if parent is not None or root else None
    if otel is None:
        yield _UNTRACED
        return
    started = otel.tracer().start_span(
        f"birddog.{name}",
        context=otel.context_of(parent),
        kind=otel.kinds[kind],
        attributes=_named(attributes),
        links=[otel.link_to(traceparent) for traceparent in links],
    )
    traced = Traced(started, otel.traceparent_of(started))
    token = _OUTGOING.set(traced.traceparent) if kind == "client" else None
    try:
        # An error's message may hold what a log never may (a token in a handler's
        # error): the span keeps the error's class only.
        with otel.trace.use_span(started, record_exception=False, set_status_on_exception=False):
            yield traced
    except BaseException as exc:
        started.set_status(otel.trace.Status(otel.trace.StatusCode.ERROR, type(exc).__name__))
        raise
    finally:
        started.end()
        if token is not None:
            _OUTGOING.reset(token)


def record(
    name: str, *, parent: str | None, since_s: float, attributes: Attributes | None = None
) -> None:
    """Record a span that already happened: ``birddog.<name>``, ``since_s`` seconds long.

    Args:
        name: the span's name after ``birddog.`` (``claim``).
        parent: the ``traceparent`` it is a child of; None records nothing.
        since_s: how long ago the span began; it ends now.
        attributes: ids for the span, each named ``birddog.<key>``.
    """
    otel = _api() if parent is not None else None
    if otel is None:
        return
    now_ns = time.time_ns()
    otel.tracer().start_span(
        f"birddog.{name}",
        context=otel.context_of(parent),
        attributes=_named(attributes),
        start_time=now_ns - int(since_s * 1e9),
    ).end(end_time=now_ns)


def _named(attributes: Attributes | None) -> dict[str, str | int]:
    """Attributes under BirdDog's prefix: ``birddog.job_id``."""
    return {f"birddog.{key}": value for key, value in (attributes or {}).items()}


def outgoing() -> str | None:
    """The ``traceparent`` header for the post being made, None outside a traced post."""
    return _OUTGOING.get()


__all__ = [
    "TRACEPARENT",
    "Traced",
    "available",
    "outgoing",
    "record",
    "span",
    "use_tracer_provider",
]
