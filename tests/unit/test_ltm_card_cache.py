"""The ledger's cache of validated cards stays within its bounds in cards and in text."""

from __future__ import annotations

from typing import Any

from memstrata.core.ltm.ledger import _ValidatedCards


def row(n: int, text: str = "s") -> dict[str, Any]:
    """A ledger row of card ``n`` (its content hash made up: the cache only compares it)."""
    return {
        "memory_id": f"ltm_{n:032d}", "user_id": "u1", "tenant_id": "t1", "project_id": None,
        "memory_type": "episode", "title": "t", "summary": text, "content": "",
        "entities": [], "tags": [], "source_type": "promoted_from_stm",
        "source_message_ids": ["m1"], "fingerprint": None, "occurred_at": None,
        "source_card_ids": [], "bm25_text": "b", "created_at": 1.0, "updated_at": 1.0,
        "importance": 0.5, "confidence": 0.5, "access_count": 0, "status": "active",
        "canonical_key": f"k{n}", "version": 1, "content_hash": f"h{n}{len(text)}",
    }  # fmt: skip


def test_the_least_recently_read_card_goes_when_the_cache_is_full() -> None:
    cache = _ValidatedCards(size=2)
    first = cache.card(row(1))
    second = cache.card(row(2))
    assert cache.card(row(1)) is first  # read again: now the most recent
    cache.card(row(3))  # over the size: card 2, the least recently read, goes
    assert cache.card(row(1)) is first
    assert cache.card(row(2)) is not second
    assert len(cache._cards) == 2


def test_text_is_bounded_and_a_large_card_is_not_kept() -> None:
    cache = _ValidatedCards(size=100, chars=6400)  # a card of over 100 characters: not kept
    big = cache.card(row(1, "x" * 200))
    assert cache.card(row(1, "x" * 200)) is not big and big.summary == "x" * 200
    for n in range(2, 200):
        cache.card(row(n, "y" * 90))  # 92 characters each (title, summary, BM25 text): 69 fit
    assert cache._held <= 6400 and len(cache._cards) == 6400 // 92
    assert cache._held == sum(weight for _, weight in cache._cards.values())
