"""Lifecycle of memories between layers (seed 1 十四, seed 2 三/四; docs/LIFECYCLE.md).

Pure rules, each a function of ``(inputs, policy, now)``:

* :func:`policy.decide`      - where an STM item goes (path A, path B, batch, stay, never)
* :func:`batch.plan_batch`   - seed 2's 5-minute job: merge >= 3 per topic, decay, drop
* :func:`forgetting.select_for_forgetting` - which LTM cards are forgotten

Applying them (each with an audit row in ``lifecycle_audit``):

* :mod:`scan` / :mod:`promote`  - the promotion scan; PG facts and LTM cards
* :mod:`scheduler`              - the batch queue job
* :mod:`retract`, :mod:`rebuild` - undo a promotion; re-derive a session's STM from L0
* :mod:`maintenance`            - recall counts, topic summaries, forgetting
* :mod:`preload`                - related LTM into a new session's STM
* :mod:`finalise`               - a session's end: summary card, STM cleaned; idle sessions
* :mod:`episodes`               - episode cards from a session's statements (at its end)

:mod:`runtime` (``Lifecycle``) is not imported here: the settings module nests
:class:`LifecycleSettings`, and ``Lifecycle`` holds the stores (built by
:meth:`core.runtime.Runtime.lifecycle`).
"""

from memstrata.core.lifecycle.batch import BatchEntry, BatchPlan, BatchPolicy, plan_batch
from memstrata.core.lifecycle.config import ForgetPolicy, LifecycleSettings
from memstrata.core.lifecycle.policy import Decision, ItemView, PromotionPolicy, Route, decide

__all__ = [
    "BatchEntry",
    "BatchPlan",
    "BatchPolicy",
    "Decision",
    "ForgetPolicy",
    "ItemView",
    "LifecycleSettings",
    "PromotionPolicy",
    "Route",
    "decide",
    "plan_batch",
]
