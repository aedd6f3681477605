"""Light then formal compression of one session into a view within a token budget."""

from __future__ import annotations

import pytest

from memstrata.core.compress.engine import compress
from memstrata.core.compress.errors import BudgetTooSmall
from memstrata.core.compress.explain import explain
from memstrata.core.compress.llm import with_mandatory
from memstrata.core.compress.model import (
    CompressedView,
    CompressionPolicy,
    Level,
    Part,
    SummaryLine,
    SummarySection,
)
from memstrata.core.compress.summary import SECTIONS
from memstrata.core.errors import InvalidInput, NotFound
from memstrata.core.models.memory import MemoryItem, MemoryType
from tests.unit.test_compress_helpers import Script, item, log_lines

CONSTRAINT = "Do not restart payment-service during business hours."
DECISION = "We'll roll back order-service to v1.4.2 first."


def debugging_session(steps: int = 12) -> tuple[Script, list[MemoryItem]]:
    """A user task, ``steps`` big log reads (every other one digested by STM), two asks."""
    s = Script()
    first = s.user(f"Checkout p99 went from 180 ms to 2.4 s. {CONSTRAINT}")
    items = [
        item(
            "m_c", MemoryType.CONSTRAINT, CONSTRAINT, message_ids=[first], subtype="user_constraint"
        )
    ]
    for k in range(steps):
        line = f"ERROR svc{k} pool exhausted: active={40 + k} max=50 wait_ms={1000 + k}"
        rid = s.step(
            f"Reading svc{k} logs.", f"c{k}", "shell", f"kubectl logs svc{k}", log_lines(80, line)
        )
        if k % 2 == 0:
            items.append(
                item(
                    f"m_o{k}",
                    MemoryType.OBSERVATION,
                    f"[shell] {line}",
                    message_ids=[rid],
                    tool_call_ids=[f"c{k}"],
                    subtype="tool_result",
                )
            )
        if k == 3:
            d = s.assistant(DECISION)
            items.append(
                item(
                    "m_d",
                    MemoryType.DECISION,
                    DECISION,
                    message_ids=[d],
                    subtype="current_decision",
                )
            )
    s.user("Also check the inventory-service alerts.")
    s.step(
        "Reading inventory logs.",
        "cx",
        "shell",
        "kubectl logs inventory",
        log_lines(40, "ERROR inventory timeout after 3000ms"),
    )
    s.assistant("Inventory logged one timeout after 3000ms; a symptom, not the cause.")
    s.user("OK. Now prepare the rollback plan.")
    return s, items


def test_a_session_that_fits_is_returned_verbatim() -> None:
    s, items = debugging_session(2)
    view = compress(s.records, items, budget_tokens=1_000_000)
    assert view.level is Level.NONE
    assert [m.content for m in view.messages] == [r.content for r in s.records]
    assert view.view_tokens == view.raw_tokens


def test_light_compression_stubs_only_digested_results_and_keeps_their_facts() -> None:
    # Given a budget a little under the raw size
    s, items = debugging_session()
    raw = compress(s.records, items, budget_tokens=None).raw_tokens
    before = [r.model_copy() for r in s.records]
    # When compressed lightly
    view = compress(s.records, items, budget_tokens=raw - 1500)
    # Then digested results became stubs naming the call and the STM fact, others stay raw
    assert view.level is Level.LIGHT
    stubs = [m for m in view.messages if m.part is Part.STUB]
    assert stubs
    for m in stubs:
        assert m.tool_call_id is not None
        k = m.tool_call_id.removeprefix("c")
        assert int(k) % 2 == 0, "only digested results (even steps) may be stubbed"
        assert m.tool_call_id in m.content and f"kubectl logs svc{k}" in m.content
        assert f"pool exhausted: active={40 + int(k)}" in m.content
    assert view.view_tokens <= raw - 1500
    # And L0 is untouched (the view is derived)
    assert s.records == before


def test_formal_compression_builds_the_seed_sections_and_keeps_every_decision() -> None:
    s, items = debugging_session(30)
    view = compress(s.records, items, budget_tokens=2500)
    assert view.level is Level.FORMAL
    assert view.view_tokens <= 2500
    assert [sec.key for sec in view.sections] == list(SECTIONS)
    summary = view.messages[0]
    assert summary.part is Part.SUMMARY and summary.role == "system"
    for title in ("Current task goal", "Key decisions and constraints", "Work done"):
        assert f"## {title}" in summary.content
    text = view.text()
    assert CONSTRAINT in text and DECISION in text
    decisions = next(sec for sec in view.sections if sec.key == "decisions")
    assert {ln.memory_id for ln in decisions.lines if ln.mandatory} >= {"m_c", "m_d"}


def test_the_near_field_is_kept_verbatim() -> None:
    s, items = debugging_session(30)
    view = compress(s.records, items, budget_tokens=2500)
    verbatim = {m.message_ids[0] for m in view.messages if m.part is Part.VERBATIM}
    latest, previous = s.records[-1], s.records[-5]
    reply = s.records[-2]
    assert latest.content.startswith("OK. Now prepare")
    assert previous.content.startswith("Also check the inventory")
    assert {latest.message_id, previous.message_id, reply.message_id} <= verbatim
    # the reply quotes the inventory log (3000ms), so that log stays verbatim too
    inv = s.records[-3]
    assert inv.tool_call_id == "cx" and inv.message_id in verbatim
    assert set(view.near_field_ids) >= {latest.message_id, previous.message_id, inv.message_id}


def test_a_budget_below_the_near_field_is_refused_with_the_size_needed() -> None:
    s, items = debugging_session(30)
    with pytest.raises(BudgetTooSmall) as err:
        compress(s.records, items, budget_tokens=100)
    assert err.value.needed > 100 and err.value.near_field > 0
    assert f"at least {err.value.needed}" in str(err.value)
    view = compress(s.records, items, budget_tokens=err.value.needed)
    assert view.view_tokens <= err.value.needed


@pytest.mark.parametrize("budget", [1200, 1500, 2000, 3000, 5000, 8000, 15000])
def test_the_view_never_exceeds_its_budget(budget: int) -> None:
    s, items = debugging_session(30)
    view = compress(s.records, items, budget_tokens=budget)
    assert view.view_tokens <= budget
    assert CONSTRAINT in view.text() and DECISION in view.text()


def test_bad_input_gets_a_clear_error() -> None:
    s, items = debugging_session(2)
    with pytest.raises(InvalidInput, match="positive"):
        compress(s.records, items, budget_tokens=0)
    with pytest.raises(NotFound, match="no messages"):
        compress([], [], budget_tokens=100)


def test_a_chinese_session_gets_chinese_section_titles() -> None:
    s = Script()
    s.user("结算接口延迟飙升，帮我定位根因。不要在工作时间重启 payment-service。")
    for k in range(20):
        s.step(f"看一下 svc{k} 的日志。", f"c{k}", "shell", f"kubectl logs svc{k}", log_lines(60))
        s.assistant("这里没有线索，继续。")
    s.user("好的，接下来看数据库。")
    view = compress(s.records, [], budget_tokens=1500)
    assert view.language == "zh"
    assert "## 当前任务目标" in view.messages[0].content
    assert "已折叠" in view.messages[0].content


def test_explain_gives_class_action_and_reason_for_every_tool_result() -> None:
    s, items = debugging_session(30)
    view = compress(s.records, items, budget_tokens=2500)
    out = explain(view)
    assert len(view.tool_results) == 31
    for t in view.tool_results:
        assert t.reason
        assert t.tool_call_id in out
    assert "digested" in out and "folded" in out


def test_a_view_round_trips_through_json() -> None:
    s, items = debugging_session(10)
    view = compress(s.records, items, budget_tokens=2000)
    again = CompressedView.model_validate_json(view.model_dump_json())
    assert again == view and again.ratio == view.ratio
    assert again.as_messages()[0]["role"] == "system"


def test_a_model_summary_cannot_drop_a_mandatory_line() -> None:
    original = [
        SummarySection(
            key="decisions",
            title="Key decisions and constraints",
            lines=[SummaryLine(text=CONSTRAINT, mandatory=True)],
        )
    ]
    rewritten = [SummarySection(key="decisions", title="Key decisions and constraints", lines=[])]
    fixed = with_mandatory(original, rewritten)
    assert [ln.text for ln in fixed[0].lines] == [CONSTRAINT]


def test_policy_knobs_are_validated() -> None:
    with pytest.raises(ValueError):
        CompressionPolicy(tail_steps=0)


class _TerseModel:
    """A stand-in summariser that keeps one optional line per section and drops the rest."""

    def summarise(self, sections, folded):  # type: ignore[no-untyped-def]
        out = []
        for s in sections:
            keep = [ln for ln in s.lines if not ln.mandatory][:1]
            out.append(s.model_copy(update={"lines": keep}))
        return out


def test_an_optional_model_summary_keeps_mandatory_lines_and_the_budget() -> None:
    from memstrata.core.compress.llm import apply_summariser
    from memstrata.core.compress.tokens import default_counter

    s, items = debugging_session(30)
    view = compress(s.records, items, budget_tokens=2500)
    rewritten = apply_summariser(view, _TerseModel(), s.records, default_counter())
    assert rewritten.view_tokens <= 2500 and rewritten.view_tokens < view.view_tokens
    assert CONSTRAINT in rewritten.messages[0].content
    assert DECISION in rewritten.messages[0].content
    assert rewritten.messages[1:] == view.messages[1:]


def test_a_stub_names_the_first_error_line_even_when_stm_kept_other_lines() -> None:
    s = Script()
    s.user("Why did the deploy fail?")
    out = log_lines(120, "ERROR migrate: relation orders_v2 already exists")
    rid = s.step("Reading the deploy log.", "c1", "shell", "kubectl logs deploy", out)
    s.assistant("Moving on to the config.")
    s.user("And now?")
    held = item("m_o", MemoryType.OBSERVATION, "[shell] worker took=17ms", message_ids=[rid],
                tool_call_ids=["c1"], subtype="tool_result")  # fmt: skip
    raw = compress(s.records, [held], budget_tokens=None).raw_tokens
    view = compress(s.records, [held], budget_tokens=raw - 500)
    stub = next(m for m in view.messages if m.tool_call_id == "c1")
    assert stub.part is Part.STUB
    assert "first error line: ERROR migrate: relation orders_v2 already exists" in stub.content
    assert "worker took=17ms" in stub.content
