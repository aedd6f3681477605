"""Tool-result dependency classes (seed 十六.5/6), decided by rules with a stated reason."""

from __future__ import annotations

from memstrata.core.compress.deps import Dependency, classify
from memstrata.core.compress.model import CompressionPolicy, DependencyClass
from memstrata.core.compress.session import index_session
from memstrata.core.compress.tokens import default_counter
from memstrata.core.models.memory import MemoryItem, MemoryType
from tests.unit.test_compress_helpers import Script, item, log_lines

POOL_LINE = "ERROR payments-db pool exhausted: active=50 max=50 wait_ms=1834"


def _classes(s: Script, items: list[MemoryItem] | None = None) -> dict[str, Dependency]:
    idx = index_session(s.records, default_counter())
    return classify(idx, items or [], CompressionPolicy())


def test_reply_quoting_the_result_makes_it_a_strong_dependency() -> None:
    # Given a log whose numbers the next reply repeats
    s = Script()
    s.user("Why is checkout slow?")
    s.step(
        "Reading the db logs.", "c1", "shell", "kubectl logs payments-db", log_lines(30, POOL_LINE)
    )
    s.assistant("The pool is saturated: active=50 max=50 and wait_ms=1834 per request.")
    # When classified / Then strong, and the reason names what was quoted
    dep = _classes(s)["c1"]
    assert dep.dependency is DependencyClass.STRONG
    assert "1834" in dep.reason


def test_reply_that_moves_on_makes_it_weak() -> None:
    s = Script()
    s.user("Why is checkout slow?")
    s.step("Listing pods.", "c1", "shell", "kubectl get pods", log_lines(30))
    s.assistant("Nothing useful there; I will look at the deploy history instead.")
    dep = _classes(s)["c1"]
    assert dep.dependency is DependencyClass.WEAK
    assert "moves on" in dep.reason


def test_result_whose_facts_stm_holds_is_digested() -> None:
    # Given an observation STM extracted from the result, and a reply quoting only that
    s = Script()
    s.user("Why is checkout slow?")
    rid = s.step(
        "Reading the db logs.", "c1", "shell", "kubectl logs payments-db", log_lines(30, POOL_LINE)
    )
    s.assistant("The pool shows active=50 max=50; checking the config next.")
    obs = item(
        "m_obs",
        MemoryType.OBSERVATION,
        f"[shell] {POOL_LINE}",
        message_ids=[rid],
        tool_call_ids=["c1"],
        subtype="tool_result",
    )
    dep = _classes(s, [obs])["c1"]
    assert dep.dependency is DependencyClass.DIGESTED
    assert "m_obs" in dep.reason
    assert [i.id for i in dep.held] == ["m_obs"]


def test_result_whose_reply_conclusion_is_stored_is_digested() -> None:
    s = Script()
    s.user("Why is checkout slow?")
    s.step(
        "Reading the db logs.", "c1", "shell", "kubectl logs payments-db", log_lines(30, POOL_LINE)
    )
    reply = s.assistant("Confirmed: the root cause is pool exhaustion (active=50, max=50).")
    fact = item(
        "m_fact",
        MemoryType.FACT,
        "Confirmed: the root cause is pool exhaustion",
        message_ids=[reply],
        subtype="conclusion",
    )
    dep = _classes(s, [fact])["c1"]
    assert dep.dependency is DependencyClass.DIGESTED
    assert "reply's conclusion" in dep.reason


def test_stm_items_that_miss_what_the_reply_quotes_do_not_digest_it() -> None:
    # Given STM holds an unrelated line of the result, while the reply quotes other numbers
    s = Script()
    s.user("Why is checkout slow?")
    rid = s.step(
        "Reading the db logs.", "c1", "shell", "kubectl logs payments-db", log_lines(30, POOL_LINE)
    )
    s.assistant("Requests r00003 and r00017 took 3ms and 17ms, wait_ms=1834 is the outlier.")
    obs = item(
        "m_obs",
        MemoryType.OBSERVATION,
        "[shell] worker restarted once",
        message_ids=[rid],
        tool_call_ids=["c1"],
        subtype="tool_result",
    )
    assert _classes(s, [obs])["c1"].dependency is DependencyClass.STRONG


def test_result_nobody_has_read_yet_is_strong_and_pending() -> None:
    s = Script()
    s.user("Run the tests.")
    s.step("Running pytest.", "c1", "shell", "pytest -q", log_lines(10, "3 failed, 97 passed"))
    dep = _classes(s)["c1"]
    assert dep.dependency is DependencyClass.STRONG
    assert dep.reply_index is None
    assert "pending" in dep.reason


def test_an_identical_later_call_supersedes_the_earlier_result() -> None:
    s = Script()
    s.user("Watch the pods.")
    s.step("Listing pods.", "c1", "shell", "kubectl get pods", log_lines(20))
    s.step("Again.", "c2", "shell", "kubectl get pods", log_lines(21))
    s.assistant("Still the same.")
    deps = _classes(s)
    assert deps["c1"].dependency is DependencyClass.DIGESTED
    assert "superseded" in deps["c1"].reason and "c2" in deps["c1"].reason
    assert deps["c2"].dependency is not DependencyClass.DIGESTED
