"""Embedding providers: cache and batching, the HTTP provider against a real local
server (no mocks), and the start-up dimension check."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import numpy as np
import pytest

from memstrata.core.errors import InvalidInput
from memstrata.core.ltm.embed_http import OpenAIEmbedder
from memstrata.core.ltm.embedding import CachedEmbedder, Vectors, check_dimension, make_embedder
from memstrata.core.ltm.errors import EmbeddingDimensionMismatch, EmbeddingUnavailable


class CountingEmbedder:
    """A tiny deterministic embedder that records every model call."""

    name = "counting"
    dim = 4

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        self.calls.append(list(texts))
        return np.array([[len(t), 1.0, 0.0, 0.0] for t in texts], dtype=np.float32)

    embed_queries = embed_documents


def test_cache_embeds_each_distinct_text_once_and_batches_the_rest() -> None:
    inner = CountingEmbedder()
    emb = CachedEmbedder(inner, capacity=100, max_batch=2)
    out = emb.embed_documents(["a", "bb", "a", "ccc"])
    assert inner.calls == [["a", "bb"], ["ccc"]]
    assert np.allclose(out[0], out[2])
    emb.embed_documents(["bb", "a"])
    assert len(inner.calls) == 2 and emb.hits == 2


def test_query_and_document_embeddings_are_cached_apart() -> None:
    inner = CountingEmbedder()
    emb = CachedEmbedder(inner)
    emb.embed_documents(["x"])
    emb.embed_query("x")
    assert len(inner.calls) == 2


def test_cache_evicts_the_least_recently_used() -> None:
    inner = CountingEmbedder()
    emb = CachedEmbedder(inner, capacity=2)
    emb.embed_documents(["a", "b"])
    emb.embed_documents(["a"])  # a is now the most recent
    emb.embed_documents(["c"])  # evicts b
    emb.embed_documents(["a", "b"])
    assert inner.calls[-1] == ["b"]


def test_repeated_queries_survive_a_document_batch_bigger_than_the_cache() -> None:
    inner = CountingEmbedder()
    emb = CachedEmbedder(inner, capacity=3, query_capacity=2)
    emb.embed_query("which incident?")
    emb.embed_documents([f"card {i}" for i in range(10)])  # indexing fills the document LRU
    calls = len(inner.calls)
    emb.embed_query("which incident?")
    assert len(inner.calls) == calls  # answered by the query LRU
    emb.embed_queries(["q1", "q2"])  # bounded: the oldest query goes
    emb.embed_query("which incident?")
    assert inner.calls[-1] == ["which incident?"]


class GatedEmbedder(CountingEmbedder):
    """Blocks inside the model until released, so a second caller meets the first mid-call."""

    def __init__(self) -> None:
        super().__init__()
        self.inside = threading.Event()
        self.release = threading.Event()

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        self.inside.set()
        assert self.release.wait(timeout=30)
        return super().embed_documents(texts)


def test_a_query_being_embedded_by_another_thread_is_waited_for_not_embedded_twice() -> None:
    # Given recall's two long-term searches asking for the same query vector at once
    inner = GatedEmbedder()
    emb = CachedEmbedder(inner)
    got: dict[str, Vectors] = {}
    first = threading.Thread(target=lambda: got.update(a=emb.embed_query("which incident?")))
    first.start()
    assert inner.inside.wait(timeout=30)  # the first is inside the model now
    second = threading.Thread(target=lambda: got.update(b=emb.embed_query("which incident?")))
    second.start()
    inner.release.set()
    first.join(timeout=30)
    second.join(timeout=30)
    # Then the model ran once and both got its vector
    assert inner.calls == [["which incident?"]]
    assert np.array_equal(got["a"], got["b"])


class FailingFirstEmbedder(CountingEmbedder):
    """Fails its first call once released; holds each later call until ``later`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.inside = threading.Event()
        self.release = threading.Event()
        self.later = threading.Event()

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        first = not self.calls
        self.calls.append(list(texts))
        if first:
            self.inside.set()
            assert self.release.wait(timeout=30)
            raise EmbeddingUnavailable("model server went away")
        assert self.later.wait(timeout=30)
        return np.array([[len(t), 1.0, 0.0, 0.0] for t in texts], dtype=np.float32)


def test_waiters_on_a_failed_embedding_embed_it_once_between_them() -> None:
    # Given a query whose embedding fails while three other threads wait for it
    inner = FailingFirstEmbedder()
    emb = CachedEmbedder(inner)
    got: list[Vectors] = []
    failed: list[Exception] = []

    def ask() -> None:
        try:
            got.append(emb.embed_query("which incident?"))
        except EmbeddingUnavailable as exc:
            failed.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(4)]
    threads[0].start()
    assert inner.inside.wait(timeout=30)
    for t in threads[1:]:
        t.start()
    time.sleep(0.2)  # the others are waiting for it (or come later: either way, once)
    inner.release.set()  # the first call fails now
    threading.Timer(0.5, inner.later.set).start()  # the retry answers a little later
    for t in threads:
        t.join(timeout=30)
    # Then the first caller sees the failure, and the waiters share one more model call
    assert len(failed) == 1 and len(got) == 3
    assert inner.calls == [["which incident?"], ["which incident?"]]


def test_the_cache_never_answers_for_another_model() -> None:
    a, b = CountingEmbedder(), make_stub(4)
    b.name = "other"
    assert CachedEmbedder(a)._key("q", "x") != CachedEmbedder(b)._key("q", "x")


def test_dimension_mismatch_is_a_clear_start_up_error() -> None:
    with pytest.raises(EmbeddingDimensionMismatch, match=r"makes 512-d vectors .* holds 384-d"):
        check_dimension(make_stub(512), 384, collection="c")


def make_stub(dim: int) -> CountingEmbedder:
    stub = CountingEmbedder()
    stub.dim = dim
    return stub


def test_unknown_provider_is_refused() -> None:
    with pytest.raises(InvalidInput):
        make_embedder("word2vec")


class _Handler(BaseHTTPRequestHandler):
    requests: ClassVar[list[dict[str, Any]]] = []
    status = 200
    dim = 3

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(
            {"path": self.path, "auth": self.headers.get("Authorization"), **body}
        )
        if type(self).status != 200:
            self.send_response(type(self).status)
            self.end_headers()
            self.wfile.write(b'{"error": "nope"}')
            return
        data = [
            {
                "object": "embedding",
                "index": i,
                "embedding": [float(len(t))] + [1.0] * (self.dim - 1),
            }
            for i, t in enumerate(body["input"])
        ]
        payload = json.dumps(
            {"object": "list", "data": list(reversed(data)), "model": body["model"]}
        )
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(payload.encode())

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    _Handler.requests = []
    _Handler.status = 200
    _Handler.dim = 3
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def test_http_provider_maps_request_and_reorders_response_by_index(server: str) -> None:
    emb = OpenAIEmbedder(base_url=server, model="m1", dim=3, api_key="k", query_prefix="query: ")
    try:
        docs = emb.embed_documents(["a", "bbb"])
        emb.embed_queries(["q"])
    finally:
        emb.close()
    first, second = _Handler.requests
    assert first == {
        "path": "/v1/embeddings",
        "auth": "Bearer k",
        "model": "m1",
        "input": ["a", "bbb"],
        "encoding_format": "float",
    }
    assert second["input"] == ["query: q"]
    assert docs.shape == (2, 3)
    assert docs[1][0] > docs[0][0]  # "bbb" came back first in the body, index 1 here
    assert np.allclose(np.linalg.norm(docs, axis=1), 1.0)


def test_http_provider_checks_the_dimension_at_start_up(server: str) -> None:
    emb = OpenAIEmbedder(base_url=server, model="m1", dim=768)
    with pytest.raises(EmbeddingDimensionMismatch, match=r"returns 3-d vectors, settings say 768"):
        emb.probe()
    emb.close()


@pytest.mark.parametrize(
    ("status", "error"),
    [(503, EmbeddingUnavailable), (429, EmbeddingUnavailable), (400, InvalidInput)],
)
def test_http_errors_are_translated(server: str, status: int, error: type[Exception]) -> None:
    _Handler.status = status
    emb = OpenAIEmbedder(base_url=server, model="m1", dim=3)
    with pytest.raises(error):
        emb.embed_documents(["a"])
    emb.close()


def test_unreachable_service_is_transient() -> None:
    emb = OpenAIEmbedder(base_url="http://127.0.0.1:9/v1", model="m1", dim=3, timeout_s=0.5)
    with pytest.raises(EmbeddingUnavailable):
        emb.embed_documents(["a"])
    emb.close()


def test_default_model_relates_chinese_and_english_by_meaning() -> None:
    emb = CachedEmbedder(make_embedder("use-multilingual"))
    docs = emb.embed_documents(["数据库连接超时", "我喜欢吃芒果冰淇淋"])
    query = emb.embed_query("database connection timeout")
    assert docs.shape == (2, 512)
    assert float(docs[0] @ query) > float(docs[1] @ query)


def test_the_default_model_leaves_blas_at_its_threads_between_calls(blas: Any) -> None:
    """USE limits BLAS for each call and restores the count it found; restoring two
    threads set OpenBLAS's second thread up again after each call, up to 0.5 ms of a 2 ms
    query (docs/PERFORMANCE.md).  The embedder holds the process at its ``threads``, so
    each call's limit is a no-op."""
    blas.limit(limits=2)  # what a fresh process on two cores starts with
    emb = make_embedder("use-multilingual", threads=1)
    emb.embed_queries(["what did the deploy change?"])
    assert {c["num_threads"] for c in blas.info()} == {1}


def test_blas_threads_that_cannot_be_set_leave_the_embedder_working(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    threadpoolctl = pytest.importorskip("threadpoolctl")

    def broken(**_: Any) -> None:
        raise OSError("no BLAS symbol")

    monkeypatch.setattr(threadpoolctl, "threadpool_limits", broken)
    with caplog.at_level("WARNING", logger="memstrata.core.ltm.embedding"):
        emb = make_embedder("use-multilingual", threads=1)
    assert "BLAS threads not set to 1: OSError: no BLAS symbol" in caplog.text
    assert emb.embed_queries(["still embeds"]).shape == (1, 512)
