"""Generation names and pointers of the LTM card indexes (core/ltm/generations.py)."""

from __future__ import annotations

import pytest

from memstrata.core.errors import StoreUnavailable
from memstrata.core.ltm.generations import Names, Pointer, RoutedLexical, generation_name


def test_generation_zero_is_the_base_name_and_later_ones_are_suffixed() -> None:
    assert generation_name("memstrata_ltm_vectors", 0) == "memstrata_ltm_vectors"
    assert generation_name("memstrata_ltm_vectors", 3) == "memstrata_ltm_vectors_g3"
    assert generation_name("memstrata-ltm", 1) == "memstrata-ltm_g1"


def test_a_pointer_writes_to_its_secondary_too() -> None:
    assert Pointer("a").targets == ("a",)
    assert Pointer("a", 1, "a_g2", "building").targets == ("a", "a_g2")


class _PointerRow:
    """The one row a ``GenerationStore`` reads, kept in memory (routing is what is tested)."""

    def __init__(self, pointer: Pointer) -> None:
        self.pointer = pointer

    def read(self, base: str) -> Pointer:
        return self.pointer


class _Recording:
    def __init__(self, name: str, calls: list[tuple[str, str]]) -> None:
        self.name, self.calls = name, calls

    def insert(self, cards: object, *, keys: object = None) -> None:
        self.calls.append(("insert", self.name))

    def upsert(self, cards: object, *, keys: object = None) -> None:
        self.calls.append(("upsert", self.name))


def _routed(pointer: Pointer) -> tuple[RoutedLexical, list[tuple[str, str]]]:
    calls: list[tuple[str, str]] = []
    names = Names(_PointerRow(pointer), "lex", refresh_s=0.0)  # type: ignore[arg-type]
    return RoutedLexical(names, lambda n: _Recording(n, calls)), calls  # type: ignore[arg-type,return-value]


def test_a_new_card_is_inserted_where_one_generation_serves() -> None:
    routed, calls = _routed(Pointer("lex"))
    routed.insert([])
    assert calls == [("insert", "lex")]


def test_while_a_reindex_copies_a_new_card_is_upserted_into_both_generations() -> None:
    # the copy may already have written the card into the new generation: an insert there
    # would hold its id twice
    routed, calls = _routed(Pointer("lex", 0, "lex_g1", "building"))
    routed.insert([])
    assert calls == [("upsert", "lex"), ("upsert", "lex_g1")]


class _FlakyRow:
    """A pointer row that is unreadable while ``down`` (PostgreSQL not answering)."""

    def __init__(self, pointer: Pointer) -> None:
        self.pointer, self.down = pointer, False

    def read(self, base: str) -> Pointer:
        if self.down:
            raise StoreUnavailable("postgres did not answer")
        return self.pointer


def test_an_unreadable_pointer_on_the_first_read_raises_instead_of_guessing_the_base() -> None:
    # after a reindex the base name no longer serves: guessing it would create an orphan
    row = _FlakyRow(Pointer("lex_g1", 1))
    row.down = True
    names = Names(row, "lex", refresh_s=0.0)  # type: ignore[arg-type]
    with pytest.raises(StoreUnavailable, match="lex"):
        names.current()
    row.down = False
    assert names.current().serving == "lex_g1"


def test_an_unreadable_pointer_after_one_good_read_keeps_the_last_one() -> None:
    row = _FlakyRow(Pointer("lex_g1", 1))
    names = Names(row, "lex", refresh_s=0.0)  # type: ignore[arg-type]
    assert names.current().serving == "lex_g1"
    row.down = True
    assert names.current(force=True).serving == "lex_g1"
