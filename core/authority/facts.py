"""Stable facts: upsert by canonical key with history, explicit saves, promotions, roles.

Every function is keyword-only and runs inside the caller's transaction; the caller
commits, then hands the returned :class:`UserVersion` to the profile cache.

Concurrency: a change first bumps ``users.authority_version`` (``UPDATE ... RETURNING``),
which takes the user's row lock, so two writers of the same user serialise; the fact is
then re-read in a new statement, which (READ COMMITTED) sees what the writer it waited
for committed.  The partial unique index ``uq_stable_memory_facts_current`` is the
backstop that holds even for a writer that skips this module: at most one current row
per (tenant, user, key).  Under REPEATABLE READ the loser gets a serialization failure,
translated to :class:`ConcurrentFactWrite` (transient: retry the transaction).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Connection, Row, func, select, update

from memstrata.core.authority.db import Db, connection_of, translated
from memstrata.core.authority.domain import (
    DEFAULT_LIMITS,
    PERMISSION_PROJECT_PREFIX,
    PROFILE_FIELDS,
    AuthorityLimits,
    FactDomain,
    FactOrigin,
    PermissionScope,
    check_key,
    check_value_shape,
    encode_value,
    parse_domain,
)
from memstrata.core.authority.errors import InvalidFactValue, UnknownProject
from memstrata.core.authority.read import raise_unknown_user
from memstrata.core.authority.schemas import (
    FactPublic,
    FactWrite,
    FactWriteResult,
    ProfileUpdate,
    PromotionRecord,
    UserVersion,
)
from memstrata.core.authority.statements import (
    NEXT_VERSION,
    READ_CURRENT,
    READ_CURRENT_FOR_WRITE,
    insert_fact,
    projection_kind,
    projection_params,
)
from memstrata.core.authority.tables import FACTS, PREFERENCES, PROFILES, PROJECTS, ROLES, USERS
from memstrata.core.errors import InvalidInput, PayloadTooLarge
from memstrata.core.ids import validate_id


def upsert_fact(
    *,
    db: Db,
    tenant_id: str,
    user_id: str,
    canonical_fact_key: str,
    domain: FactDomain | str,
    value: Any,
    origin: FactOrigin = FactOrigin.ADMIN,
    source_memory_ids: Sequence[str] = (),
    source_message_ids: Sequence[str] = (),
    promotion: PromotionRecord | None = None,
    limits: AuthorityLimits = DEFAULT_LIMITS,
) -> FactWriteResult:
    """Make ``value`` the current value of ``canonical_fact_key`` for one user.

    An identical value is a no-op (``changed=False``, version unchanged); a different one
    supersedes the current row, which stays as history.  Everything is validated before
    the first statement: a bad id, domain, key, shape or size writes nothing.
    """
    validate_id(tenant_id, kind="tenant_id")
    validate_id(user_id, kind="user_id")
    dom = parse_domain(domain)
    key = check_key(dom, canonical_fact_key)
    enc = encode_value(value, limits=limits)
    shaped = check_value_shape(key, enc.value)
    if shaped != enc.value:
        enc = encode_value(shaped, limits=limits)
    memory_ids = _ids(source_memory_ids, "memory_id", limits)
    message_ids = _ids(source_message_ids, "message_id", limits)
    promo = _promotion(promotion, limits)
    conn = connection_of(db)
    with translated(f"upsert {key}"):
        # optimistic read without a lock: an unchanged value (the common case for repeated
        # promotions) costs one statement and a read-only commit
        seen = _read_current(conn, tenant_id, user_id, key)
        if seen.fact_id is not None and seen.f_value_hash == enc.digest:
            return _unchanged(seen, tenant_id, user_id, seen.authority_version)
        if key.startswith(PERMISSION_PROJECT_PREFIX):
            _require_project(conn, tenant_id, key.removeprefix(PERMISSION_PROJECT_PREFIX))
        version = _lock_and_bump(conn, tenant_id, user_id)
        current = _read_current(conn, tenant_id, user_id, key, for_write=True)
        if current.fact_id is not None and current.f_value_hash == enc.digest:
            return _unchanged(current, tenant_id, user_id, version.version)  # a racer wrote it
        # wall-clock time read after the lock (not now(), the transaction start), never
        # before the value it replaces: history intervals stay ordered across writers
        at = current.now
        if current.fact_id is not None:
            at = max(at, current.f_valid_from)
            conn.execute(
                update(FACTS)
                .where(FACTS.c.id == current.fact_id)
                .values(superseded_at=at, superseded_by=current.new_id)
            )
        kind = projection_kind(key)
        params = {
            "id": current.new_id,
            "tenant_id": tenant_id,
            "user_id": user_id,
            "canonical_fact_key": key,
            "domain": dom.value,
            "value": enc.value,
            "value_hash": enc.digest,
            "origin": origin.value,
            "source_memory_ids": memory_ids,
            "source_message_ids": message_ids,
            "promotion": promo,
            "valid_from": at,
            **projection_params(kind, key, enc.value),
        }
        row = conn.execute(insert_fact(kind), params).one()
    return FactWriteResult(
        fact=FactPublic.model_validate(row._mapping),
        changed=True,
        superseded_id=current.fact_id,
        version=version,
    )


def apply_fact_write(*, db: Db, tenant_id: str, user_id: str, write: FactWrite) -> FactWriteResult:
    """:func:`upsert_fact` from a validated :class:`FactWrite` (a task payload, an API body)."""
    return upsert_fact(
        db=db,
        tenant_id=tenant_id,
        user_id=user_id,
        canonical_fact_key=write.canonical_fact_key,
        domain=write.domain,
        value=write.value,
        origin=write.origin,
        source_memory_ids=write.source_memory_ids,
        source_message_ids=write.source_message_ids,
        promotion=write.promotion,
    )


def save_explicit(
    *,
    db: Db,
    tenant_id: str,
    user_id: str,
    canonical_fact_key: str,
    domain: FactDomain | str,
    value: Any,
    message_ids: Sequence[str],
    limits: AuthorityLimits = DEFAULT_LIMITS,
) -> FactWriteResult:
    """ "Remember this as my default ...": the user said it, so it is saved as said."""
    return upsert_fact(
        db=db,
        tenant_id=tenant_id,
        user_id=user_id,
        canonical_fact_key=canonical_fact_key,
        domain=domain,
        value=value,
        origin=FactOrigin.EXPLICIT,
        source_message_ids=message_ids,
        promotion=PromotionRecord(rule="explicit_save", note="saved on the user's request"),
        limits=limits,
    )


def promote_fact(
    *,
    db: Db,
    tenant_id: str,
    user_id: str,
    canonical_fact_key: str,
    domain: FactDomain | str,
    value: Any,
    source_memory_ids: Sequence[str],
    source_message_ids: Sequence[str] = (),
    promotion: PromotionRecord,
    limits: AuthorityLimits = DEFAULT_LIMITS,
) -> FactWriteResult:
    """Path A of seed 十四: an STM item proved stable; keep its provenance with the fact."""
    if not source_memory_ids:
        raise InvalidInput("a promotion must name the STM items it comes from")
    return upsert_fact(
        db=db,
        tenant_id=tenant_id,
        user_id=user_id,
        canonical_fact_key=canonical_fact_key,
        domain=domain,
        value=value,
        origin=FactOrigin.PROMOTION,
        source_memory_ids=source_memory_ids,
        source_message_ids=source_message_ids,
        promotion=promotion,
        limits=limits,
    )


def grant_role(
    *,
    db: Db,
    tenant_id: str,
    user_id: str,
    project_id: str,
    role: str,
    scope: PermissionScope | str,
) -> FactWriteResult:
    """Give a user a role on a project: a ``permission.project.<id>`` fact (with history)."""
    validate_id(project_id, kind="project_id")
    return upsert_fact(
        db=db,
        tenant_id=tenant_id,
        user_id=user_id,
        canonical_fact_key=f"{PERMISSION_PROJECT_PREFIX}{project_id}",
        domain=FactDomain.PERMISSION,
        value={"role": role, "scope": str(scope)},
    )


def set_profile(
    *, db: Db, tenant_id: str, user_id: str, update: ProfileUpdate | dict[str, Any]
) -> list[FactWriteResult]:
    """Set the given ``profile.*`` fields, one fact each (unset fields are left alone)."""
    try:
        upd = ProfileUpdate.model_validate(update)
    except ValidationError as exc:
        raise InvalidFactValue(f"invalid profile update: {exc}") from exc
    out = []
    for name, value in upd.model_dump(exclude_none=True).items():
        out.append(
            upsert_fact(
                db=db,
                tenant_id=tenant_id,
                user_id=user_id,
                canonical_fact_key=f"profile.{name}",
                domain=FactDomain.PROFILE,
                value=value,
            )
        )
    return out


def retract_fact(
    *, db: Db, tenant_id: str, user_id: str, canonical_fact_key: str
) -> UserVersion | None:
    """End the current value of a key without a successor (e.g. revoke a role).

    Returns the new version, or None when the key had no current value (nothing written).
    """
    validate_id(tenant_id, kind="tenant_id")
    validate_id(user_id, kind="user_id")
    dom = parse_domain(canonical_fact_key.split(".", 1)[0])
    key = check_key(dom, canonical_fact_key)
    conn = connection_of(db)
    with translated(f"retract {key}"):
        seen = _read_current(conn, tenant_id, user_id, key)
        if seen.fact_id is None:
            return None
        version = _lock_and_bump(conn, tenant_id, user_id)
        current = _read_current(conn, tenant_id, user_id, key, for_write=True)
        if current.fact_id is None:
            return version  # a racer retracted it first
        conn.execute(
            update(FACTS)
            .where(FACTS.c.id == current.fact_id)
            .values(superseded_at=max(current.now, current.f_valid_from))
        )
        _unproject(conn, tenant_id, user_id, key)
        return version


def fact_history(
    *, db: Db, tenant_id: str, user_id: str, canonical_fact_key: str
) -> list[FactPublic]:
    """Every version of a key, oldest first; the last one is current unless retracted."""
    validate_id(tenant_id, kind="tenant_id")
    validate_id(user_id, kind="user_id")
    conn = connection_of(db)
    with translated("fact history"):
        rows = conn.execute(
            select(FACTS)
            .where(
                FACTS.c.tenant_id == tenant_id,
                FACTS.c.user_id == user_id,
                FACTS.c.canonical_fact_key == canonical_fact_key,
            )
            .order_by(FACTS.c.valid_from, FACTS.c.id)
        ).all()
    return [FactPublic.model_validate(r._mapping) for r in rows]


# ---------------------------------------------------------------------- helpers
def _ids(values: Sequence[str], kind: str, limits: AuthorityLimits) -> list[str]:
    if isinstance(values, str):
        raise InvalidInput(f"{kind}s must be a list of ids, not one string")
    if len(values) > limits.max_sources:
        raise PayloadTooLarge(f"{len(values)} {kind}s; limit {limits.max_sources}")
    return [validate_id(v, kind=kind) for v in values]


def _promotion(record: PromotionRecord | None, limits: AuthorityLimits) -> dict[str, Any] | None:
    if record is None:
        return None
    data = record.model_dump(mode="json")
    enc = encode_value(
        data, limits=limits.model_copy(update={"max_value_bytes": limits.max_promotion_bytes})
    )
    assert isinstance(enc.value, dict)
    return enc.value


def _read_current(
    conn: Connection, tenant_id: str, user_id: str, key: str, *, for_write: bool = False
) -> Row[Any]:
    """The user's version and the key's current fact (``fact_id`` None if there is none).

    Always one row, or :class:`UnknownUser` / :class:`UnknownTenant`.  ``for_write`` adds
    the wall-clock time and a fresh fact id; it is read after :func:`_lock_and_bump`, in
    a new statement so that (READ COMMITTED) it sees what a writer we waited for
    committed.  Reading in the locking statement itself would re-check only the locked
    row and return the fact as it was before the wait (found by the race test).
    """
    stmt = READ_CURRENT_FOR_WRITE if for_write else READ_CURRENT
    params = {"tenant_id": tenant_id, "user_id": user_id, "key": key}
    row: Row[Any] | None = conn.execute(stmt, params).first()
    if row is None:
        raise_unknown_user(conn, tenant_id, user_id)
    return row


def _lock_and_bump(conn: Connection, tenant_id: str, user_id: str) -> UserVersion:
    """Take the user's row lock (serialising writers of one user) and bump the version."""
    version = conn.execute(
        update(USERS)
        .where(USERS.c.tenant_id == tenant_id, USERS.c.id == user_id)
        .values(authority_version=NEXT_VERSION)
        .returning(USERS.c.authority_version)
    ).scalar()
    if version is None:
        raise_unknown_user(conn, tenant_id, user_id)
    return UserVersion(tenant_id=tenant_id, user_id=user_id, version=int(version))


def _unchanged(row: Row[Any], tenant_id: str, user_id: str, version: int) -> FactWriteResult:
    return FactWriteResult(
        fact=_public(row, prefix="f_"),
        changed=False,
        version=UserVersion(tenant_id=tenant_id, user_id=user_id, version=version),
    )


def _require_project(conn: Connection, tenant_id: str, project_id: str) -> None:
    found = conn.execute(
        select(PROJECTS.c.id).where(PROJECTS.c.tenant_id == tenant_id, PROJECTS.c.id == project_id)
    ).first()
    if found is None:
        raise UnknownProject(f"no project {project_id!r} in tenant {tenant_id!r}")


def _public(row: Row[Any], *, prefix: str) -> FactPublic:
    data = {k.removeprefix(prefix): v for k, v in row._mapping.items() if k.startswith(prefix)}
    return FactPublic.model_validate(data)


def _unproject(conn: Connection, tenant_id: str, user_id: str, key: str) -> None:
    name = key.split(".", 1)[1]
    if key.startswith("profile.") and name in PROFILE_FIELDS:
        conn.execute(
            update(PROFILES)
            .where(PROFILES.c.tenant_id == tenant_id, PROFILES.c.user_id == user_id)
            .values({name: None, "updated_at": func.now()})
        )
    elif key.startswith("preference."):
        conn.execute(
            PREFERENCES.delete().where(
                PREFERENCES.c.tenant_id == tenant_id,
                PREFERENCES.c.user_id == user_id,
                PREFERENCES.c.name == name,
            )
        )
    elif key.startswith(PERMISSION_PROJECT_PREFIX):
        conn.execute(
            ROLES.delete().where(
                ROLES.c.tenant_id == tenant_id,
                ROLES.c.user_id == user_id,
                ROLES.c.project_id == key.removeprefix(PERMISSION_PROJECT_PREFIX),
            )
        )
