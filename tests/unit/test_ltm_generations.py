"""Generation names and pointers of the LTM card indexes (core/ltm/generations.py)."""

from __future__ import annotations

from memstrata.core.ltm.generations import Pointer, generation_name


def test_generation_zero_is_the_base_name_and_later_ones_are_suffixed() -> None:
    assert generation_name("memstrata_ltm_vectors", 0) == "memstrata_ltm_vectors"
    assert generation_name("memstrata_ltm_vectors", 3) == "memstrata_ltm_vectors_g3"
    assert generation_name("memstrata-ltm", 1) == "memstrata-ltm_g1"


def test_a_pointer_writes_to_its_secondary_too() -> None:
    assert Pointer("a").targets == ("a",)
    assert Pointer("a", 1, "a_g2", "building").targets == ("a", "a_g2")
