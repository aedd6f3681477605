"""The expire sweep's plan, read-only: which items a sweep at ``now`` would remove.

``memstrata sweep --dry-run`` prints it.  It reads the same keys the sweep script uses
(``sweep:users`` hint, then each due user's ``expire`` index), in the same order, and
changes nothing.
"""

from __future__ import annotations

import time

from memstrata.core.ids import external_user_id
from memstrata.core.keys import parse_user_scope
from memstrata.core.models.memory import MemoryItem
from memstrata.core.runtime import Runtime
from memstrata.ops.report import duration


def plan_sweep(res: Runtime, *, now: float, max_items: int) -> list[tuple[str, MemoryItem]]:
    """(owner, item) pairs a sweep at ``now`` would remove, at most ``max_items``.

    The sweep hint holds owner scopes (``<tenant>/<user key>``, ``core.keys.user_scope``);
    the owner is shown as ``<tenant>/<external user id>``.
    """
    r, stm = res.redis, res.stm
    plan: list[tuple[str, MemoryItem]] = []
    due_users = r.zrangebyscore(stm.gkeys.sweep_users, "-inf", now)
    for raw_scope in due_users:
        user_id, tenant_id = parse_user_scope(str(raw_scope))
        budget = max_items - len(plan)
        if budget <= 0:
            break
        ids = stm.expired_ids(user_id, now=now, limit=budget, tenant_id=tenant_id)
        items = stm.get_many(user_id, ids, include_expired=True, tenant_id=tenant_id)
        owner = f"{tenant_id}/{external_user_id(user_id)}"
        plan.extend((owner, item) for item in items)
    return plan


def render_plan(plan: list[tuple[str, MemoryItem]], *, ahead_s: float = 0.0) -> str:
    when = f"in {duration(ahead_s)}" if ahead_s else "now"
    if not plan:
        return f"dry run: a sweep {when} would remove nothing"
    lines = [f"dry run: a sweep {when} would remove {len(plan)} item(s):"]
    now = time.time()
    for user_id, item in plan:
        if item.expires_at <= now:
            when_expired = f"expired {duration(now - item.expires_at)} ago"
        else:
            when_expired = f"expires in {duration(item.expires_at - now)}"
        lines.append(
            f"  {user_id:<16} {item.id}  {item.memory_type.value:<11} "
            f"{when_expired:<18} {item.summary[:70]}"
        )
    return "\n".join(lines)
