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

Import from the submodules.  This package imports nothing: every ``import
core.authority.<x>`` runs this file first, so a re-exporting facade here would load
SQLAlchemy, SQLModel and Redis into the pure rules (domain, domain_authority, blocks).
"""
