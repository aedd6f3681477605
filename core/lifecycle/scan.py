"""The promotion scan (Beat): read every live STM item, decide, apply.  Bounded by items
and seconds; resumes after the last user it reached (round robin over all users).

``dry_run=True`` decides without applying and returns every decision ("what would be
promoted, and why?").  Items already queued, promoted, merged, dropped or retracted
with the same fingerprint are not decided again.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from memstrata.core.lifecycle.policy import Decision, ItemView, decide
from memstrata.core.lifecycle.promote import apply, is_open
from memstrata.core.lifecycle.runtime import Lifecycle
from memstrata.core.lifecycle.states import Record
from memstrata.core.lifecycle.views import (
    UserBatch,
    fetch_users,
    parse_users,
    read_users,
    user_scopes,
)

USERS_PER_ROUND = 200


@dataclass
class ScanReport:
    users: int = 0
    items: int = 0
    routes: Counter[str] = field(default_factory=Counter)
    applied: dict[str, int] = field(default_factory=dict)
    decisions: list[tuple[ItemView, Decision]] = field(default_factory=list)
    complete: bool = True

    def summary(self) -> dict[str, int]:
        return {"users": self.users, "items": self.items, **dict(self.routes),
                **{f"applied_{k}": v for k, v in self.applied.items()},
                "complete": int(self.complete)}  # fmt: skip


def _read(lc: Lifecycle, scopes: Sequence[str], now: float) -> list[UserBatch]:
    pol = lc.settings.promotion
    return read_users(lc.store, scopes, now=now, never_types=pol.never_types,
                      never_subtypes=pol.never_subtypes)  # fmt: skip


def decide_users(
    lc: Lifecycle, batches: Sequence[UserBatch], *, now: float
) -> list[tuple[ItemView, Decision, Record | None]]:
    """Decisions for every open item of the given users (pure once the data is read)."""
    policy = lc.settings.promotion
    out = []
    for ub in batches:
        for view in ub.items:
            prior = ub.records.get(view.memory_id)
            if not is_open(prior, view.fingerprint):
                continue
            d = decide(view, hits=ub.hits.get(view.memory_id, 0), policy=policy, now=now)
            out.append((view, d, prior))
    return out


def scan(
    lc: Lifecycle,
    *,
    now: float,
    max_items: int,
    max_s: float,
    dry_run: bool = False,
    keep_decisions: bool = False,
) -> ScanReport:
    """One bounded pass of the promotion scan.

    The next users' items are fetched by a prefetch thread while this thread decides
    (and applies) the current ones: Redis and Python then work at the same time.
    """
    t0 = time.monotonic()
    report = ScanReport()
    after = lc.store.cursor("scan")
    scopes = list(user_scopes(lc.stm, after=after))
    chunks = [scopes[i : i + USERS_PER_ROUND] for i in range(0, len(scopes), USERS_PER_ROUND)]
    pol = lc.settings.promotion
    last = ""
    applied: Counter[str] = Counter()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="lifecycle-scan") as pool:

        def fetch(chunk: list[str]) -> Future[list[str]]:
            return pool.submit(
                fetch_users, lc.store, chunk, now=now,
                never_types=pol.never_types, never_subtypes=pol.never_subtypes,
            )  # fmt: skip

        pending = fetch(chunks[0]) if chunks else None
        for n, chunk in enumerate(chunks):
            assert pending is not None
            replies = pending.result()
            pending = fetch(chunks[n + 1]) if n + 1 < len(chunks) else None
            batches = parse_users(chunk, replies)
            plans = decide_users(lc, batches, now=now)
            report.users += len(chunk)
            report.items += sum(len(b.items) + b.never + b.settled for b in batches)
            report.routes.update(d.route.value for _v, d, _r in plans)
            report.routes["never"] += sum(b.never for b in batches)
            report.routes["settled"] += sum(b.settled for b in batches)
            if keep_decisions or dry_run:
                report.decisions.extend((v, d) for v, d, _r in plans)
            if not dry_run:
                applied.update(apply(lc, plans, now=now).counts())
            last = chunk[-1]
            if report.items >= max_items or time.monotonic() - t0 >= max_s:
                report.complete = n + 1 >= len(chunks)
                break
        if pending is not None:
            pending.cancel()
    report.applied = dict(applied)
    if not dry_run:
        lc.store.set_cursor("scan", None if report.complete else last)
    return report


def scan_user(
    lc: Lifecycle, user_id: str, *, tenant_id: str | None = None, now: float,
    dry_run: bool = False,
) -> ScanReport:  # fmt: skip
    """The scan for one user (session finalisation, the API's "promote now")."""
    batch = _read(lc, [lc.stm.keys(user_id, tenant_id).scope], now)
    plans = decide_users(lc, batch, now=now)
    report = ScanReport(users=1, items=len(batch[0].items) + batch[0].never + batch[0].settled)
    report.routes.update(d.route.value for _v, d, _r in plans)
    report.routes.update(never=batch[0].never, settled=batch[0].settled)
    report.decisions = [(v, d) for v, d, _r in plans]
    if not dry_run:
        report.applied = apply(lc, plans, now=now).counts()
    return report
