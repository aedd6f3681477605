"""The post-batch hook of a drain (the compression trigger's token tracking) survives a
soft time limit landing inside it: real Redis, the real pipeline and queue."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from memstrata.core.compress.cache import SessionActivity
from memstrata.core.compress.tokens import EstimateCounter
from memstrata.core.ingest.drain import drain_shard
from memstrata.core.models.transcript import MessageIn, TranscriptRecord, TurnPointer
from memstrata.core.runtime import Runtime

pytestmark = pytest.mark.integration

NOW = 1_900_000_000.0


class SoftLimit(Exception):  # stands for Celery's SoftTimeLimitExceeded
    """What the worker raises in the task's thread when its soft time limit passes."""


def test_a_soft_limit_in_the_post_batch_hook_leaves_the_batch_to_be_tracked_again(
    res: Runtime,
) -> None:
    activity = SessionActivity(res.redis, namespace=res.settings.key_namespace)
    shards = set()
    mids = []
    for n in range(3):
        turn = res.transcript.append_turn(
            user_id="u1", session_id="s1", at=NOW + n,
            messages=[MessageIn(role="user", content=f"The build number {n} went green today")],
        )  # fmt: skip
        shards.add(res.queue.enqueue(turn.pointer)[0])
        mids += [r.message_id for r in turn.records]
    [shard] = shards  # one session's turns share a shard
    hooked: list[int] = []

    def hook(batch: Sequence[tuple[TurnPointer, Sequence[TranscriptRecord]]]) -> None:
        """The ingest task's tracking; the first call is cut off after one turn."""
        hooked.append(len(batch))
        for n, (_pointer, records) in enumerate(batch):
            if len(hooked) == 1 and n == 1:
                raise SoftLimit
            activity.note_turn(records, EstimateCounter())

    def drain() -> int:
        return drain_shard(
            shard, queue=res.queue, transcript=res.transcript, pipeline=res.pipeline,
            consumer="c1", batch=50, max_run_s=60, on_batch=hook, attempts=res.attempts,
            abort_on=(SoftLimit,),
        ).turns  # fmt: skip

    with pytest.raises(SoftLimit):  # the task fails and hands the shard on
        drain()
    assert drain() == 3  # the continuation re-runs the batch (alone, counted) and its hook
    counts = activity.token_counts("u1", "s1")
    assert sorted(counts) == sorted(mids)  # every message tracked, the cut-off ones too
    ctx = activity.get("u1", "s1")
    assert ctx is not None and ctx.tokens == sum(counts.values())  # and each counted once
    assert drain() == 0 and res.redis.xlen(res.queue.keys.dead_letters) == 0


def test_a_bug_in_the_post_batch_hook_never_dead_letters_turns_already_written(
    res: Runtime,
) -> None:
    turn = res.transcript.append_turn(
        user_id="u2", session_id="s2", at=NOW,
        messages=[MessageIn(role="user", content="Remember that the release freeze starts Monday")],
    )  # fmt: skip
    [shard] = {res.queue.enqueue(turn.pointer)[0]}

    def broken(batch: Sequence[tuple[TurnPointer, Sequence[TranscriptRecord]]]) -> None:
        raise RuntimeError("a bug in the hook")

    def drain() -> int:
        return drain_shard(
            shard, queue=res.queue, transcript=res.transcript, pipeline=res.pipeline,
            consumer="c1", batch=50, max_run_s=60, on_batch=broken, attempts=res.attempts,
            abort_on=(SoftLimit,),
        ).turns  # fmt: skip

    assert drain() == 1  # processed and acknowledged despite the hook
    assert drain() == 0  # nothing left pending to fail again
    assert res.redis.xlen(res.queue.keys.dead_letters) == 0
    assert res.stm.session_members("u2", "s2")  # its memory was written
