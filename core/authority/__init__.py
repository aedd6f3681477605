"""L1: the PostgreSQL authority layer (seed 第1层, 三, 六, 八.2, 十.2, 十五.3).

PG is the final word on who the user is, what they may do, the defaults and the project
metadata; it is never a semantic guess.  Modules, one concern each:

    errors            typed errors, all derived from core.errors
    domain            fact domains, canonical keys, value encoding and limits
    tables            SQLModel table models (storage); built by core.migrations (branch authority)
    schemas           create / update / public models
    db                engine factory, Session-or-Connection, vendor error translation
    admin             tenants, users, projects, workspaces, agent settings, user deletion
    facts             stable facts: upsert with history, explicit save, promotion, roles
    statements        the prebuilt Core statements of the fact write path
    read              one-round-trip snapshot read
    snapshot          the snapshot model and "what is authoritative for this key?"
    cache             Redis snapshot cache with PG version stamps (missing / stale signals)
    filters           retrieval filters for STM / LTM reads, derived from the snapshot
    blocks            profile / constraints / runtime-metadata blocks, zh and en
    domain_authority  pure rule: PG overrides recalled candidates in its domains
"""

from core.authority.admin import (
    create_project,
    create_tenant,
    create_user,
    create_workspace,
    delete_user,
    set_agent_setting,
    update_project,
)
from core.authority.blocks import AuthorityBlocks, build_blocks
from core.authority.cache import CacheLookup, CacheStatus, ProfileCache
from core.authority.db import autocommit_reader, make_engine
from core.authority.domain import AUTHORITATIVE_DOMAINS, FactDomain, FactOrigin, PermissionScope
from core.authority.domain_authority import (
    AuthorityCandidate,
    AuthorityOutcome,
    AuthorityPolicy,
    arbitrate,
)
from core.authority.facts import (
    apply_fact_write,
    fact_history,
    grant_role,
    promote_fact,
    retract_fact,
    save_explicit,
    set_profile,
    upsert_fact,
)
from core.authority.filters import RetrievalFilters, filters_for
from core.authority.read import read_snapshot, read_version
from core.authority.snapshot import AuthoritySnapshot

__all__ = [
    "AUTHORITATIVE_DOMAINS",
    "AuthorityBlocks",
    "AuthorityCandidate",
    "AuthorityOutcome",
    "AuthorityPolicy",
    "AuthoritySnapshot",
    "CacheLookup",
    "CacheStatus",
    "FactDomain",
    "FactOrigin",
    "PermissionScope",
    "ProfileCache",
    "RetrievalFilters",
    "apply_fact_write",
    "arbitrate",
    "autocommit_reader",
    "build_blocks",
    "create_project",
    "create_tenant",
    "create_user",
    "create_workspace",
    "delete_user",
    "fact_history",
    "filters_for",
    "grant_role",
    "make_engine",
    "promote_fact",
    "read_snapshot",
    "read_version",
    "retract_fact",
    "save_explicit",
    "set_agent_setting",
    "set_profile",
    "update_project",
    "upsert_fact",
]
