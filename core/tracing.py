"""Optional OpenTelemetry spans: ``recall``, ``record_turn``, ``drain`` and ``promote``.

Off unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set (OpenTelemetry's own variable, which
its exporter reads too): then :func:`span` is a ``nullcontext`` and nothing of
OpenTelemetry is imported, so an agent process pays nothing.  When it is set, the first
span installs the SDK's OTLP/HTTP exporter (the ``memstrata[otel]`` extra) unless the
process already has a tracer provider (a host application's own, which is then used as
it is).  Without the extra a warning is logged once and spans go to the API's global
provider (a no-op unless the host installed one), or nowhere without the API either.
Attributes are ids only, never text; a ``user_id`` is the stored key part, which for an
external id such as an e-mail address is its reversible encoding (``core.ids.user_key``):
treat traces as personal data.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, TypeVar, cast

log = logging.getLogger(__name__)

ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
F = TypeVar("F", bound=Callable[..., Any])
_lock = threading.Lock()
_tracer: Any = None


def enabled() -> bool:
    return bool(os.environ.get(ENDPOINT_ENV))


def span(name: str, **attributes: str | int | float | None) -> AbstractContextManager[Any]:
    """A span ``memstrata.<name>`` around the block when tracing is on, else nothing."""
    if not enabled():
        return nullcontext()
    tracer = _get_tracer()
    if tracer is _NO_API:
        return nullcontext()
    attrs = {f"memstrata.{k}": v for k, v in attributes.items() if v is not None}
    started = tracer.start_as_current_span(f"memstrata.{name}", attributes=attrs)
    return cast(AbstractContextManager[Any], started)


def traced(name: str, *ids: str) -> Callable[[F], F]:
    """Decorator: a span around each call, with the arguments named in ``ids``."""

    def wrap(fn: F) -> F:
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            if not enabled():
                return fn(*args, **kwargs)
            given = signature.bind_partial(*args, **kwargs).arguments
            attrs = {k: v for k in ids if isinstance(v := given.get(k), str | int | float)}
            with span(name, **attrs):
                return fn(*args, **kwargs)

        return cast(F, inner)

    return wrap


def _get_tracer() -> Any:
    global _tracer
    if _tracer is None:
        with _lock:
            if _tracer is None:
                _tracer = _setup()
    return _tracer


_NO_API = object()  # the tracer when not even opentelemetry-api is installed


def _setup() -> Any:
    try:
        from opentelemetry import trace
    except ImportError as exc:  # a traced call must never fail for want of tracing
        log.warning("%s is set but OpenTelemetry is not installed "
                    "(pip install 'memstrata[otel]'): %s", ENDPOINT_ENV, exc)  # fmt: skip
        return _NO_API

    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):  # none installed
        try:
            # the [otel] extra; not installed where mypy runs, hence the ignores
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[import-not-found,unused-ignore]
                OTLPSpanExporter,
            )
            from opentelemetry.sdk.resources import (  # type: ignore[import-not-found,unused-ignore]
                Resource,
            )
            from opentelemetry.sdk.trace import (  # type: ignore[import-not-found,unused-ignore]
                TracerProvider,
            )
            from opentelemetry.sdk.trace.export import (  # type: ignore[import-not-found,unused-ignore]
                BatchSpanProcessor,
            )
        except ImportError as exc:
            log.warning("%s is set but the OpenTelemetry SDK is not installed "
                        "(pip install 'memstrata[otel]'): %s", ENDPOINT_ENV, exc)  # fmt: skip
        else:
            name = os.environ.get("OTEL_SERVICE_NAME", "memstrata")
            provider = TracerProvider(resource=Resource.create({"service.name": name}))
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
            trace.set_tracer_provider(provider)
    return trace.get_tracer("memstrata")


def reset() -> None:
    """Forget the tracer (tests; a process that changed its provider)."""
    global _tracer
    _tracer = None
