"""The key module: its builders, the families it declares, and docs/KEYS.md agree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from memstrata.core.keys import (
    FAMILIES,
    AuthorityKeys,
    CompressKeys,
    GlobalKeys,
    LifecycleKeys,
    TenantKeys,
    UserKeys,
    families_of,
    index_suffixes,
    parse_user_scope,
    user_scope,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "KEYS.md"
NS = "memory"
_ROW = re.compile(r"^\|\s*`(<ns>:[^`]+)`\s*\|\s*([A-Za-z]+)\s*\|")


def _doc_rows() -> list[tuple[str, str]]:
    """(shape, type) of every key-table row of docs/KEYS.md, in document order."""
    rows = []
    for line in DOC.read_text(encoding="utf-8").splitlines():
        m = _ROW.match(line)
        if m:
            rows.append((m.group(1), m.group(2)))
    return rows


def test_the_doc_lists_exactly_the_families_the_module_declares() -> None:
    declared = [(f.shape, f.type) for f in FAMILIES]
    assert _doc_rows() == declared


def test_every_family_is_declared_once() -> None:
    shapes = [f.shape for f in FAMILIES]
    assert len(shapes) == len(set(shapes))


U = UserKeys(NS, "u_1", "t_a")
LK = LifecycleKeys(NS)
GK = GlobalKeys(NS)
CK = CompressKeys(NS, "u_1", "t_a")
AK = AuthorityKeys(NS, "t_a", "u_1")
TK = TenantKeys(NS, "t_a")

# every builder, with the exact string it has always produced (the layout never changed)
BUILT = [
    (U.item("m_1"), "memory:user:{t_a/u_1}:item:m_1"),
    (U.recent, "memory:user:{t_a/u_1}:recent"),
    (U.session("s_1"), "memory:user:{t_a/u_1}:session:s_1"),
    (U.task("bug456"), "memory:user:{t_a/u_1}:task:bug456"),
    (U.entity("Thread_Pool"), "memory:user:{t_a/u_1}:entity:thread_pool"),
    (U.expire, "memory:user:{t_a/u_1}:expire"),
    (U.evict("s_1"), "memory:user:{t_a/u_1}:evict:s_1"),
    (U.canon, "memory:user:{t_a/u_1}:canon"),
    (U.fp, "memory:user:{t_a/u_1}:fp"),
    (U.decisions("s_1"), "memory:user:{t_a/u_1}:decisions:s_1"),
    (TK.users, "memory:tenant:{t_a}:users"),
    (TK.items, "memory:tenant:{t_a}:items"),
    (GK.ingest_stream(3), "memory:ingest:{s3}:stream"),
    (GK.ingest_kick(3), "memory:ingest:{s3}:kick"),
    (GK.ingest_attempts(3), "memory:ingest:{s3}:attempts"),
    (GK.ingest_queued(3, "acme/u_1", "s_1", "9f2c"), "memory:ingest:{s3}:queued:acme/u_1/s_1:9f2c"),
    (GK.dead_letters, "memory:ingest:dead"),
    (GK.sweep_users, "memory:sweep:users"),
    (GK.lock("lifecycle-scan"), "memory:lock:lifecycle-scan"),
    (GK.job_run("sweep-expired-stm"), "memory:job:sweep-expired-stm"),
    (GK.jobs, "memory:jobs"),
    (GK.celery_prefix + "ingest", "memory:celery:ingest"),
    (AK.snapshot, "memory:user:{t_a/u_1}:authority:snapshot"),
    (AK.version, "memory:user:{t_a/u_1}:authority:version"),
    (LK.state("u_1", "t_a"), "memory:user:{t_a/u_1}:lifecycle"),
    (LK.card_access("u_1", "t_a"), "memory:user:{t_a/u_1}:card_access"),
    (LK.access("u_1", "t_a"), "memory:user:{t_a/u_1}:access"),
    (U.last_recall("s_1"), "memory:user:{t_a/u_1}:lastrecall:s_1"),
    (LK.batch, "memory:lifecycle:batch"),
    (LK.finalised, "memory:lifecycle:finalised"),
    (LK.access_cursor, "memory:lifecycle:access_cursor"),
    (LK.scan_cursor, "memory:lifecycle:scan_cursor"),
    (CK.view("s_1", "msg_9", 600), "memory:compress:{t_a/u_1}:view:s_1:msg_9:600"),
    (CK.ctx("s_1"), "memory:compress:{t_a/u_1}:ctx:s_1"),
    (CK.ctok("s_1"), "memory:compress:{t_a/u_1}:ctok:s_1"),
    (GK.compress_active, "memory:compress:active"),
]


@pytest.mark.parametrize(("key", "expected"), BUILT, ids=[e for _k, e in BUILT])
def test_each_builder_gives_its_documented_key(key: str, expected: str) -> None:
    assert key == expected


def test_each_family_has_a_builder_and_each_built_key_one_family() -> None:
    # in declaration order: the list above walks the families one by one
    assert [families_of(key, NS) for key, _e in BUILT] == [[f] for f in FAMILIES]


def test_keys_of_another_namespace_or_shape_match_no_family() -> None:
    assert families_of("other:user:{t_a/u_1}:recent", NS) == []
    assert families_of("memory:user:{u_1}:recent", NS) == []  # the pre-tenant scope
    assert families_of("memory:user:{t_a/u_1}:unknown", NS) == []
    assert families_of("memory:ingest:{s3}:stream:x", NS) == []


def test_free_text_entities_become_a_hashed_key_part_of_the_same_family() -> None:
    key = U.entity("Thread Pool")
    assert key == "memory:user:{t_a/u_1}:entity:h_0ddb73b79b795b5c"
    assert [f.shape for f in families_of(key, NS)] == ["<ns>:user:{<u>}:entity:<entity>"]


def test_no_tenant_is_the_default_tenant_and_scopes_parse_back() -> None:
    assert UserKeys(NS, "u_1").prefix == UserKeys(NS, "u_1", "default").prefix
    assert user_scope("u_1") == "default/u_1"
    assert parse_user_scope(user_scope("u_1", "t_a")) == ("u_1", "t_a")
    assert AK.prefix == U.prefix + "authority:"


def test_index_suffixes_are_the_user_prefix_relative_index_keys() -> None:
    suffixes = index_suffixes(session_id="s_1", task_id="bug456", entities=["Thread Pool"])
    assert [U.prefix + s for s in suffixes] == [
        U.recent, U.session("s_1"), U.task("bug456"), U.entity("Thread Pool")
    ]  # fmt: skip
    assert U.suffix(U.session("s_1")) == "session:s_1"
    with pytest.raises(ValueError):
        U.suffix(UserKeys(NS, "u_2").recent)


def test_an_owners_cached_key_objects_are_reused_and_still_refuse_a_bad_id() -> None:
    from memstrata.core.errors import InvalidId
    from memstrata.core.keys import authority_keys, user_keys

    # Given the cached constructors a recall uses for an owner's keys
    a = user_keys("ns", "alice", "acme")
    # Then the same owner gets the same object (its prefix worked out once), equal to a
    # fresh one, and another owner gets its own
    assert user_keys("ns", "alice", "acme") is a
    fresh = UserKeys("ns", "alice", "acme")
    assert a == fresh and a.prefix == fresh.prefix
    assert user_keys("ns", "bob", "acme").prefix != a.prefix
    assert authority_keys("ns", "acme", "alice").snapshot == a.prefix + "authority:snapshot"
    # And an invalid id is refused on every use, not remembered as valid, and takes no slot
    held = user_keys.cache_info().currsize
    for _ in range(2):
        with pytest.raises(InvalidId):
            _ = user_keys("ns", "../alice", "acme").prefix
        with pytest.raises(InvalidId):
            authority_keys("ns", "acme", "../alice")
    assert user_keys.cache_info().currsize == held
