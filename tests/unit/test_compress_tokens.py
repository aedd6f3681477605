"""Token counting with the bundled offline cl100k_base tokenizer, and the compress trigger."""

from __future__ import annotations

import pytest

from memstrata.core.compress.cache import crossed
from memstrata.core.compress.tokens import (
    MESSAGE_OVERHEAD,
    Cl100kCounter,
    default_counter,
    message_tokens,
)
from memstrata.core.models.transcript import Role, ToolCall, TranscriptRecord


def test_counts_are_real_cl100k_tokens_without_network() -> None:
    c = default_counter()
    # reference values of cl100k_base (tiktoken), not a chars/4 estimate
    assert c.count("hello world") == 2
    assert c.count("Hello 世界，数据库连接池耗尽 createOrder  \n\n  x=1234567") == 23
    assert c.count("") == 0


def test_chinese_costs_about_a_token_per_character_not_a_quarter() -> None:
    text = "今天上午发布后结算接口延迟飙升帮我定位根因并修复"
    assert default_counter().count(text) >= len(text) * 0.8


def test_batch_and_single_counts_agree() -> None:
    c = Cl100kCounter()
    big = "pool exhausted 数据库连接池 " * 12_000  # over the batch threshold: threads
    texts = ["alpha beta", "数据库连接池", "x" * 5000, "alpha beta", big]
    assert c.count_many(texts) == [Cl100kCounter().count(t) for t in texts]


class _ClearedMeanwhile(Cl100kCounter):
    """Another thread (a recall) fills the shared cache past its size between each store."""

    def _remember(self, text: str, n: int) -> None:
        super()._remember(text, n)
        self.clear()


def test_many_counts_survive_the_cache_being_cleared_meanwhile() -> None:
    # Given a cache another thread empties while a batch is being counted
    c = _ClearedMeanwhile()
    texts = ["alpha beta", "数据库连接池", "alpha beta", ""]
    # Then every count is still the text's own (it used to read 0 back from the cache)
    assert c.count_many(texts) == [2, Cl100kCounter().count("数据库连接池"), 2, 0]


def test_a_message_costs_its_content_calls_and_framing() -> None:
    rec = TranscriptRecord(
        message_id="m1",
        turn_id="t1",
        user_id="u1",
        session_id="s1",
        role=Role.ASSISTANT,
        content="hello world",
        tool_calls=[ToolCall(id="c1", name="shell", arguments="ls")],
        at=0,
    )
    c = default_counter()
    assert message_tokens(c, rec) == MESSAGE_OVERHEAD + 2 + c.count("shell") + c.count("ls") + 3


@pytest.mark.parametrize(
    ("before", "after", "fires"),
    [
        (0, 31_999, False),  # under the threshold
        (31_000, 32_000, True),  # passes it
        (32_500, 40_000, False),  # already past, same step
        (47_000, 48_500, True),  # next step (threshold + 16k)
    ],
)
def test_compression_triggers_at_the_threshold_then_every_step(
    before: int, after: int, fires: bool
) -> None:
    assert crossed(before, after, threshold=32_000, step=16_000) is fires
