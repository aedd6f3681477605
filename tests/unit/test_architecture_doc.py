"""docs/ARCHITECTURE.md's tables agree with the code they describe (Beat, queues, links)."""

from __future__ import annotations

import re
from pathlib import Path

from memstrata.beat_schedule import build_schedule
from memstrata.core.settings import load_settings
from memstrata.tasks import _options as names

DOCS = Path(__file__).resolve().parents[2] / "docs"
TEXT = (DOCS / "ARCHITECTURE.md").read_text(encoding="utf-8")


def test_the_beat_table_is_the_schedule() -> None:
    schedule = build_schedule(load_settings())
    rows = re.findall(r"^\| ([a-z-]+) \| `(memstrata\.[a-z_.]+)` \| (\d+) s", TEXT, flags=re.M)
    assert {entry: (task, float(every)) for entry, task, every in rows} == {
        entry: (job["task"], job["schedule"]) for entry, job in schedule.items()
    }
    for job in schedule.values():  # each runs on the queue its name's prefix routes to
        assert job["options"]["queue"] == job["task"].split(".")[1]


def test_every_task_name_the_page_cites_exists() -> None:
    known = {v for k, v in vars(names).items() if k.isupper() and isinstance(v, str)}
    known = {v for v in known if v.startswith("memstrata.")}
    cited = set(re.findall(r"`(memstrata\.(?:ingest|ltm|maintenance)\.[a-z_]+)`", TEXT))
    assert cited and cited <= known, cited - known


def test_the_links_resolve() -> None:
    for target in re.findall(r"\]\(([A-Z_a-z-]+\.md)(?:#[^)]*)?\)", TEXT):
        assert (DOCS / target).is_file(), target
