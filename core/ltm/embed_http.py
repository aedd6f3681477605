"""OpenAI-compatible embeddings over HTTP (``POST {base_url}/embeddings``), via httpx.

Request ``{"model", "input": [..], "encoding_format": "float"}`` (plus ``dimensions``
when configured); response ``{"data": [{"index", "embedding"}]}``, re-ordered by
``index``.  Transport errors, timeouts, 429 and 5xx are transient
(:class:`EmbeddingUnavailable`); other 4xx and malformed bodies are permanent.  The
dimension is declared in settings and checked against every response, so a wrong
model name fails at start-up (:meth:`OpenAIEmbedder.probe`) rather than in Milvus.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx
import numpy as np

from memstrata.core.errors import InvalidInput
from memstrata.core.ltm.embedding import Vectors, _normalised
from memstrata.core.ltm.errors import EmbeddingDimensionMismatch, EmbeddingUnavailable


class OpenAIEmbedder:
    """Embeddings from an OpenAI-compatible server; ``timeout_s`` bounds each call."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        dim: int,
        api_key: str | None = None,
        timeout_s: float = 10.0,
        send_dimensions: bool = False,
        query_prefix: str = "",
        document_prefix: str = "",
        client: httpx.Client | None = None,
    ) -> None:
        if dim < 1:
            raise InvalidInput("embedding dim must be positive")
        self.name = f"openai:{model}"
        self.model = model
        self.dim = dim
        self.send_dimensions = send_dimensions
        self.query_prefix = query_prefix
        self.document_prefix = document_prefix
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = client or httpx.Client(
            base_url=base_url.rstrip("/") + "/", headers=headers, timeout=timeout_s
        )

    def close(self) -> None:
        self._client.close()

    def _post(self, texts: list[str]) -> Vectors:
        body: dict[str, Any] = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self.send_dimensions:
            body["dimensions"] = self.dim
        try:
            response = self._client.post("embeddings", json=body)
        except httpx.HTTPError as exc:
            raise EmbeddingUnavailable(f"embedding service unreachable: {exc}") from exc
        if response.status_code == 429 or response.status_code >= 500:
            raise EmbeddingUnavailable(f"embedding service answered {response.status_code}")
        if response.status_code >= 400:
            raise InvalidInput(
                f"embedding service refused the request ({response.status_code}): "
                f"{response.text[:200]}"
            )
        return self._parse(response, len(texts))

    def _parse(self, response: httpx.Response, count: int) -> Vectors:
        try:
            items = sorted(response.json()["data"], key=lambda item: int(item["index"]))
            rows = [item["embedding"] for item in items]
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidInput(f"malformed embeddings response: {exc}") from exc
        if len(rows) != count:
            raise InvalidInput(f"embedding service returned {len(rows)} vectors for {count} texts")
        if rows and len(rows[0]) != self.dim:
            raise EmbeddingDimensionMismatch(
                f"model {self.model} returns {len(rows[0])}-d vectors, settings say {self.dim}"
            )
        return _normalised(np.asarray(rows, dtype=np.float32), self.dim, self.name)

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        return self._post([self.document_prefix + t for t in texts])

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        return self._post([self.query_prefix + t for t in texts])

    def probe(self) -> None:
        """One tiny request at start-up: fails fast on a wrong URL, key, model or dim."""
        self._post(["dimension probe"])
