"""Data of the LTM benchmark: MADial-Bench (read in place) and synthetic cards.

MADial-Bench recipe (shared/bench/README.md): a user's memory archive entries become
LTM cards (id = archive key), the query is the dialogue before the first ``test-turn``,
candidates are that user's memories only, gold = ``relevant-id``.  The English archive
has no ``user-id``; its owner comes from the Chinese archive, which holds the same keys
(:mod:`ops.bench.common.madial`, the one reader of those files).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from memstrata.core.ltm.card import CardDraft
from memstrata.ops.bench.common.madial import read_madial

DEFAULT_MADIAL = Path(__file__).resolve().parents[3] / "shared" / "bench" / "madial-bench"


@dataclass(frozen=True)
class Memory:
    key: str
    user: str
    text: str
    scene: str


@dataclass(frozen=True)
class Query:
    user: str
    text: str
    gold: frozenset[str]


def madial_cases(lang: str, root: Path = DEFAULT_MADIAL) -> tuple[list[Memory], list[Query]]:
    """Memories and queries of one language (``en`` or ``zh``): the LTM bench's framing."""
    folder = read_madial(root / lang, dialogue_file=f"MADial-Bench-{lang}-dialogue.json")
    queries = []
    for d in folder.dialogues:
        first = d.test_turns[0]
        text = "\n".join(t.strip() for t in d.lines[1:first])
        queries.append(Query(d.user, text, frozenset(d.relevant)))
    memories = [Memory(e.key, e.owner or "unknown", e.event, e.scene) for e in folder.archive]
    return memories, queries


def memory_draft(memory: Memory, tenant: str) -> CardDraft:
    title = memory.text[:80]
    return CardDraft(
        tenant_id=tenant,
        user_id=f"u{memory.user}",
        canonical_key=f"madial.{memory.key}",
        memory_type="episodic_event",
        title=title,
        summary=memory.text,
        tags=[memory.scene] if memory.scene else [],
        source_type="benchmark",
        importance=0.5,
    )


def metrics(ranked: Sequence[str], gold: frozenset[str], k: int) -> dict[str, float]:
    top = list(ranked[:k])
    hits = [1.0 if m in gold else 0.0 for m in top]
    dcg = sum(h / math.log2(i + 2) for i, h in enumerate(hits))
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(gold), k)))
    rr = next((1.0 / (i + 1) for i, m in enumerate(ranked) if m in gold), 0.0)
    return {
        f"recall@{k}": sum(hits) / len(gold) if gold else 0.0,
        f"ndcg@{k}": dcg / ideal if ideal else 0.0,
        "mrr": rr,
    }


SERVICES = [
    "payment-service",
    "order-service",
    "auth-gateway",
    "inventoryApi",
    "user_profile",
    "notifyWorker",
]
APIS = [
    "createOrder",
    "refundPayment",
    "getUserProfile",
    "listInventory",
    "sendNotice",
    "applyCoupon",
]
CODES = [
    "ERR_CONN_RESET",
    "ORA-00942",
    "E1234",
    "HTTP504",
    "0x80070005",
    "ECONNREFUSED",
    "OOMKilled",
]
EN = [
    "timed out after the database failover",
    "thread pool saturated under peak load",
    "rolled back after a failed health check",
    "memory leak traced to an unbounded cache",
    "retries amplified the outage",
    "slow query fixed by adding an index",
    "certificate expired on the load balancer",
]
ZH = [
    "数据库正常时常见根因是线程池饱和",
    "发布后健康检查失败已回滚",
    "缓存无上限导致内存泄漏",
    "重试风暴放大了故障",
    "慢查询加索引后恢复",
    "负载均衡证书过期",
    "用户偏好简洁的中文回答",
]


def synthetic_draft(i: int, rng: random.Random, *, tenant: str, users: int) -> CardDraft:
    """A plausible incident / preference card; ids and texts vary with ``i``."""
    service, api, code = rng.choice(SERVICES), rng.choice(APIS), rng.choice(CODES)
    en, zh = rng.choice(EN), rng.choice(ZH)
    return CardDraft(
        tenant_id=tenant,
        user_id=f"u{i % users}",
        project_id=f"p{i % 7}",
        canonical_key=f"synthetic.{i}",
        title=f"{api} {code} on {service} #{i}",
        summary=f"{api} on {service} {en}; {zh}（案例 {i}）",
        content=f"Case {i}: {code} seen on {service} while calling {api}. {en}. {zh}。",
        entities=[api, service],
        tags=["case", code.lower()],
        importance=round(rng.random(), 3),
    )


def synthetic_query(rng: random.Random) -> str:
    form = rng.randrange(3)
    if form == 0:
        return f"{rng.choice(APIS)} {rng.choice(CODES)}"
    if form == 1:
        return f"{rng.choice(SERVICES)} {rng.choice(EN)}"
    return f"{rng.choice(APIS)} {rng.choice(ZH)}"
