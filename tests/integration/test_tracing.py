"""Optional OpenTelemetry spans: off (and OpenTelemetry not even imported) without
OTEL_EXPORTER_OTLP_ENDPOINT; with it, record_turn is one span named for its owner, ids
only.  A recording tracer provider of the test's own stands in for the SDK, which this
suite does not install (the ``memstrata[otel]`` extra)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from opentelemetry import trace

from memstrata.core import tracing
from memstrata.core.api import MemoryClient
from memstrata.core.runtime import Runtime
from tests.integration.conftest import REPO_ROOT

pytestmark = pytest.mark.integration


class _Recorder(trace.Tracer):
    def __init__(self) -> None:
        self.spans: list[tuple[str, dict[str, Any]]] = []

    def start_span(self, name: str, *args: Any, attributes: Any = None, **kw: Any) -> trace.Span:
        self.spans.append((name, dict(attributes or {})))
        return trace.INVALID_SPAN

    @contextmanager
    def start_as_current_span(  # type: ignore[override]
        self, name: str, *args: Any, attributes: Any = None, **kw: Any
    ) -> Iterator[trace.Span]:
        yield self.start_span(name, attributes=attributes)


class _Provider(trace.TracerProvider):
    def __init__(self, tracer: _Recorder) -> None:
        self.tracer = tracer

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return self.tracer


def test_without_an_endpoint_nothing_of_opentelemetry_is_imported() -> None:
    code = (
        "import sys; from memstrata.core import tracing\n"
        "with tracing.span('recall', user_id='u'): pass\n"
        "print(tracing.enabled(), any(m.startswith('opentelemetry') for m in sys.modules))"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT)}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env,
                         capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    assert out.stdout.split() == ["False", "False"], out


def test_with_an_endpoint_record_turn_is_a_span_that_names_its_owner(
    res: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = _Recorder()
    monkeypatch.setenv(tracing.ENDPOINT_ENV, "http://127.0.0.1:4318")
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: _Provider(recorder))
    monkeypatch.setattr(trace, "get_tracer", lambda *a, **k: recorder)
    tracing.reset()
    try:
        client = MemoryClient(transcript=res.transcript, queue=res.queue, kicker=lambda s: None)
        message = {"role": "user", "content": "secret 1234"}
        receipt = client.record_turn(tenant_id="acme", user_id="u_1", session_id="s1",
                                     messages=[message])  # fmt: skip
    finally:
        tracing.reset()
    assert recorder.spans == [("memstrata.record_turn", {
        "memstrata.tenant_id": "acme", "memstrata.user_id": "u_1",
        "memstrata.session_id": "s1"})]  # fmt: skip
    assert receipt.turn_id and "secret" not in repr(recorder.spans)


def test_with_an_endpoint_but_no_opentelemetry_at_all_a_traced_call_still_runs() -> None:
    # opentelemetry-api itself missing (the client-only install has no fastapi to bring it)
    code = (
        "import sys; sys.modules['opentelemetry'] = None\n"
        "from memstrata.core import tracing\n"
        "with tracing.span('recall', user_id='u1'):\n"
        "    print('ran')\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT),
           tracing.ENDPOINT_ENV: "http://127.0.0.1:4318"}  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env,
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["ran"]
    assert "OpenTelemetry is not installed" in out.stderr
