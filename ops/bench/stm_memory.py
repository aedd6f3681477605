"""Redis bytes per stored STM item: the item's hash plus its share of every index.

Why this figure: Redis holds all of short-term memory in RAM, so bytes per item times
items per user times users is the memory a deployment needs (review D9 measured ~3,957
bytes per item of ``used_memory`` growth, decisions included).  ``MEMORY USAGE <key>
SAMPLES 0`` is exact per key, so the figure does not depend on what else the server
holds: the item hashes, the owners' index keys (``recent``, ``session:*``, ``task:*``,
``entity:*``, ``type:*``, ``expire``, ``evict:*``, ``canon``, ``fp``) and the sweep hint,
divided by the live items.  Write decisions, lifecycle records and recall bookkeeping
are other keys and are not counted (decisions are reported on their own, per turn).

Two loads, each at two sizes of user (the encoding of a sorted set or hash changes from
a compact listpack to a hashtable / skiplist past Redis' ``*-max-listpack-entries``):

* ``mix``: the STM benchmark's realistic items (debugging facts in English and Chinese,
  two entities, a task, 10 % restated and 10 % changed), through ``StmStore.upsert``;
* ``marker``: the reliability review's load (probe 8): one casual user statement per
  turn through L0 and the real ingest pipeline (rule extractor, write policy), which
  stores one ``fact/conversation_fact`` item per turn.
"""

from __future__ import annotations

import collections
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from memstrata.core.extract.rules import RuleExtractor
from memstrata.core.ingest.pipeline import IngestPipeline
from memstrata.core.models.transcript import MessageIn
from memstrata.core.policy.write import WritePolicy
from memstrata.core.stm.store import StmStore
from memstrata.core.transcript.store import TranscriptStore
from memstrata.ops.bench.common.env import new_namespace, purge

# the per-owner STM keys that exist because of items (their entries are the items' indexes)
_INDEX_FAMILIES = ("recent", "session", "task", "entity", "type", "expire", "evict", "canon",
                   "fp")  # fmt: skip
SIZES = (40, 400)  # items per user
TARGET_BYTES_PER_ITEM = 1200  # issue #14 item 6, incl. the item's index entries
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def marker_statement(n: int) -> str:
    """The review's marker statement with a unique name (letters only, as there)."""
    tag = ""
    while True:
        n, r = divmod(n, 26)
        tag += _LETTERS[r]
        if n == 0:
            break
    return f"My neighbour keeps a parrot named mk{tag} in the garden shed"


def server_settings(client: redis.Redis) -> dict[str, str]:
    """The server settings that decide the encodings (and so the bytes) measured."""
    names = ("hash-max-listpack-entries", "hash-max-listpack-value",
             "zset-max-listpack-entries", "zset-max-listpack-value", "maxmemory",
             "maxmemory-policy")  # fmt: skip
    out: dict[str, str] = {}
    for name in names:
        got = client.config_get(name)
        out[name] = str(got.get(name, ""))
    return out


def tally(client: redis.Redis, namespace: str) -> dict[str, Any]:
    """Bytes of the namespace's items and index keys per live item (``MEMORY USAGE``)."""
    by_family: collections.Counter[str] = collections.Counter()
    encodings: collections.Counter[str] = collections.Counter()
    decisions = 0
    items = 0
    for key in client.scan_iter(match=f"{namespace}:*", count=1000):
        size = int(client.memory_usage(key, samples=0) or 0)
        if ":user:{" not in key:
            if key.endswith(":sweep:users"):
                by_family["sweep"] += size
            continue
        family = key.split("}:", 1)[1].split(":", 1)[0]
        if family == "item":
            items += 1
            by_family["item"] += size
            encodings[str(client.object("encoding", key))] += 1
        elif family in _INDEX_FAMILIES:
            by_family[family] += size
        elif family == "decisions":
            decisions += size
    live = max(1, items)
    index = sum(v for k, v in by_family.items() if k != "item")
    return {
        "items": items,
        "bytes_per_item": round((by_family["item"] + index) / live, 1),
        "item_hash_bytes": round(by_family["item"] / live, 1),
        "index_bytes_per_item": round(index / live, 1),
        "index_bytes_by_family": {
            k: round(v / live, 1) for k, v in sorted(by_family.items()) if k != "item"
        },
        "item_encodings": dict(encodings),
        "decision_bytes": decisions,
    }


def measure_mix(
    client: redis.Redis, *, users: int, per_user: int, **store_kw: Any
) -> dict[str, Any]:
    """The STM benchmark's item mix, ``per_user`` items per user on average."""
    from memstrata.ops.bench.stm import _items  # the same realistic items as the latency figures

    ns = new_namespace("benchmem")
    store = StmStore(client, namespace=ns, **store_kw)
    try:
        # sessions of ~20 items, so the per-session cap (50) does not thin the users out
        items = _items(users * per_user, users, max(1, per_user // 20), seed=7, now=time.time())
        for i in range(0, len(items), 200):
            store.upsert_many(items[i : i + 200])
        return tally(client, ns)
    finally:
        purge(client, ns)


def measure_marker(
    client: redis.Redis, *, users: int, per_user: int, **store_kw: Any
) -> dict[str, Any]:
    """The review's marker turns through L0 and the real ingest pipeline."""
    ns = new_namespace("benchmem")
    store = StmStore(client, namespace=ns, **store_kw)
    pipeline = IngestPipeline(
        store=store,
        extractor=RuleExtractor(conversation_facts=True),
        policy=WritePolicy(),
        decision_ttl_s=3600,
    )
    now = time.time()
    try:
        with tempfile.TemporaryDirectory(prefix="benchmem") as folder:
            l0 = TranscriptStore(Path(folder), fsync=False)
            n = 0
            for t in range(per_user):
                batch = []
                for u in range(users):
                    turn = l0.append_turn(
                        user_id=f"u{u}", session_id=f"s{u}_{t // 20}",
                        messages=[MessageIn(role="user", content=marker_statement(n))],
                        at=now + n * 1e-3,
                    )  # fmt: skip
                    batch.append((turn.pointer, list(turn.records)))
                    n += 1
                pipeline.process(batch)
        out = tally(client, ns)
        out["decision_bytes_per_turn"] = round(out.pop("decision_bytes") / max(1, n), 1)
        return out
    finally:
        purge(client, ns)


def run(client: redis.Redis, *, quick: bool, **store_kw: Any) -> dict[str, Any]:
    """Both loads at both user sizes on ``client``'s server, with its encoding settings."""
    users = 5 if quick else 20
    figures: dict[str, Any] = {"server": server_settings(client)}
    for per_user in SIZES:
        figures[f"mix_{per_user}"] = measure_mix(client, users=users, per_user=per_user,
                                                 **store_kw)  # fmt: skip
        figures[f"marker_{per_user}"] = measure_marker(client, users=users, per_user=per_user,
                                                       **store_kw)  # fmt: skip
    # headline: the realistic mix for a user holding a few hundred items
    figures["bytes_per_item"] = figures[f"mix_{SIZES[-1]}"]["bytes_per_item"]
    return figures


def markdown_rows(label: str, figures: dict[str, Any]) -> list[str]:
    rows = []
    for per_user in SIZES:
        for load in ("mix", "marker"):
            f = figures[f"{load}_{per_user}"]
            enc = ", ".join(f"{k} {v}" for k, v in sorted(f["item_encodings"].items()))
            rows.append(
                f"| {label} | {load} | {per_user} | **{f['bytes_per_item']}** | "
                f"{f['item_hash_bytes']} | {f['index_bytes_per_item']} | {enc} |"
            )
    return rows


def main() -> None:
    """``python -m memstrata.ops.bench.stm_memory [--quick]``: the memory rows of ``bench stm``
    alone."""
    import argparse
    import json

    from memstrata.ops.bench.stm import _memory, _memory_lines

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    mem = _memory(args.quick)
    print(json.dumps(mem) if args.json else "\n".join(_memory_lines(mem)))


if __name__ == "__main__":
    main()
