"""Word-to-word similarity from static word vectors, for the pool's topic rank.

A question often shares no word with the line that answers it: "What pets does
Caroline have?" is answered by "my dog Oscar loves the park", "Which instrument does
she play?" by "I've been practising the guitar".  The long-term layers' lexical list
cannot see that, and a sentence embedding of the whole question is nearly flat over a
person's chit-chat (docs/QUALITY.md, ninth and fourteenth waves).  Word vectors can
("pets"·"dog" 0.40, "instrument"·"guitar" 0.59, unrelated words near 0.1): each topic
word of the question meets its closest word of the line (late interaction, one vector
per word, as in ColBERT, with a static table instead of a transformer).

The table is WordLlama's ``l2_supercat`` (Lee Miller, MIT): 32,000 Llama-2 sub-word
tokens × 256 dimensions, float16, 16 MB, shipped inside the ``wordllama`` wheel, so
nothing is downloaded at run time.  A word's vector is the mean of its tokens',
L2-normalised.  English only: other words get no vector (a Chinese question keeps its
exact term matches).  The package itself is never imported (0.4 s of start-up for a
loader this module does not need): :func:`read_wordllama` reads its two files, for the
``wordllama`` embedder too.
"""

from __future__ import annotations

import importlib.util
import re
import threading
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

__all__ = ["StaticWordVectors", "WordVectors", "best_matches", "read_wordllama", "vector_words"]

_WORD = re.compile(r"[a-z][a-z'-]{2,}")
MAX_WORD_CHARS = 40
"""Longer "words" (a URL's run of letters, a hash) get no vector: nothing is like them."""


def vector_words(terms: Collection[str]) -> list[str]:
    """The terms a vector is looked up for, sorted: lower-case English words of 3 to 40
    letters (Chinese characters, digits and identifiers are matched exactly or not at all)."""
    return sorted(t for t in terms if len(t) <= MAX_WORD_CHARS and _WORD.fullmatch(t))


class WordVectors(Protocol):
    """Unit vectors for words: row ``i`` is ``words[i]``'s (zeros when it has none)."""

    def vectors(self, words: Sequence[str]) -> npt.NDArray[np.float32]: ...


def best_matches(
    topic: Sequence[str], words: Sequence[str], table: WordVectors
) -> npt.NDArray[np.float32]:
    """Cosine similarity of every topic word with every word, clipped at 0: shape
    ``(len(topic), len(words))``, in one product (the pool asks once per recall with
    every long-term line's words, then takes each line's columns).

    The product is taken in float64 and rounded to float32 once: a float32 product's
    last bit depends on how BLAS splits it (its thread count, the host's cores), and a
    last bit decided near ties of the topic rank, which then moved a LoCoMo question
    in eighty.  Rounded from float64, each cosine is the same on any host."""
    if not topic or not words:
        return np.zeros((len(topic), len(words)), dtype=np.float32)
    exact = table.vectors(topic).astype(np.float64) @ table.vectors(words).T.astype(np.float64)
    sims: npt.NDArray[np.float32] = exact.astype(np.float32)
    np.maximum(sims, 0.0, out=sims)
    return sims


class _Encoding(Protocol):
    @property
    def ids(self) -> list[int]: ...


class _Tokenizer(Protocol):
    def encode_batch(
        self, input: Sequence[str], is_pretokenized: bool = ..., add_special_tokens: bool = ...
    ) -> Sequence[_Encoding]: ...


def read_wordllama(dim: int = 256, root: Path | None = None) -> tuple[npt.NDArray[np.float16], Any]:
    """WordLlama's ``l2_supercat`` token table (32,000 × ``dim``, float16) and its
    tokenizer (a ``tokenizers.Tokenizer``), read from the installed ``wordllama`` wheel.

    Its own ``WordLlama.load`` (0.4.0) looks for the tokenizer in ``tokenizer/`` while the
    wheel has it in ``tokenizers/``, and then downloads it; and importing the package
    costs 0.4 s.  So the folder is found without importing it and both files are read
    here: nothing is ever fetched.  ``ModuleNotFoundError`` without the wheel,
    ``OSError`` when its files cannot be read (``tokenizers`` and ``safetensors`` raise
    plain ``Exception`` subclasses).  ``root``: another folder of the same layout."""
    from safetensors import safe_open
    from tokenizers import Tokenizer

    if root is None:
        spec = importlib.util.find_spec("wordllama")
        if spec is None or not spec.submodule_search_locations:
            raise ModuleNotFoundError("wordllama is not installed (pip install wordllama)")
        root = Path(next(iter(spec.submodule_search_locations)))
    try:
        tokenizer = Tokenizer.from_file(
            str(root / "tokenizers" / "l2_supercat_tokenizer_config.json")
        )
        with safe_open(
            str(root / "weights" / f"l2_supercat_{dim}.safetensors"), framework="np"
        ) as f:
            table = f.get_tensor("embedding.weight")
    except Exception as exc:
        raise OSError(f"cannot read the word vectors in {root}: {exc}") from exc
    return table, tokenizer


class StaticWordVectors:
    """:class:`WordVectors` from a static sub-word table (WordLlama ``l2_supercat``).

    Thread-safe: the REST service's thread pool shares one instance.  Vectors are kept
    per word in one preallocated matrix of ``capacity`` rows (1 KB each, 16 MB at the
    default), which starts over when full: a user's recalls meet the same words again,
    and a pool's vocabulary (a few hundred words) is then one gather, not a Python loop
    over rows.
    """

    def __init__(
        self, table: npt.NDArray[np.float16], tokenizer: _Tokenizer, *, capacity: int = 16_384
    ) -> None:
        # one zero row after the table: the padding of words with fewer tokens
        self._table = np.vstack([table, np.zeros((1, table.shape[1]), dtype=table.dtype)])
        self._pad = len(table)
        self._tokenizer = tokenizer
        self.dim = int(table.shape[1])
        self._rows = np.zeros((capacity, self.dim), dtype=np.float32)
        self._row_of: dict[str, int] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_package(cls, *, capacity: int = 16_384) -> StaticWordVectors:
        """The table and tokenizer inside the installed ``wordllama`` wheel;
        ``ModuleNotFoundError`` without it, ``OSError`` when its files cannot be read."""
        table, tokenizer = read_wordllama()
        return cls(table, tokenizer, capacity=capacity)

    @property
    def cached(self) -> int:
        """How many words have a vector kept."""
        return len(self._row_of)

    def _compute(self, words: Sequence[str]) -> npt.NDArray[np.float32]:
        """Unit mean token vectors of ``words`` (zeros for a word without tokens)."""
        if not words:
            return np.zeros((0, self.dim), dtype=np.float32)
        encoded = self._tokenizer.encode_batch(list(words), add_special_tokens=False)
        ids = [[i for i in e.ids if i > 0] for e in encoded]  # 0 pads
        grid = np.full((len(ids), max(1, *map(len, ids))), self._pad, dtype=np.int64)
        for row, word_ids in enumerate(ids):
            grid[row, : len(word_ids)] = word_ids
        out: npt.NDArray[np.float32] = self._table[grid].astype(np.float32).sum(axis=1)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        np.divide(out, norms, out=out, where=norms > 0)
        return out

    def vectors(self, words: Sequence[str]) -> npt.NDArray[np.float32]:
        unique = set(words)
        if not unique or len(unique) > len(self._rows):  # none, or more than it holds: not kept
            return self._compute(words)
        for _ in range(3):
            with self._lock:
                missing = sorted(unique - self._row_of.keys())
            fresh = self._compute(missing) if missing else None  # outside the lock: slow
            with self._lock:  # the gather too: a full cache starts over under any caller
                if fresh is not None:
                    if len(self._row_of) + len(missing) > len(self._rows):
                        self._row_of.clear()
                    for w, v in zip(missing, fresh, strict=True):
                        if w not in self._row_of:
                            self._row_of[w] = row = len(self._row_of)
                            self._rows[row] = v
                rows = [self._row_of.get(w, -1) for w in words]
                if -1 not in rows:
                    return self._rows[rows]
            # the cache started over between the two locks: look up what it dropped again
        return self._compute(words)
