"""The installed distribution is one namespace: ``memstrata`` and nothing else at the top.

An agent project with its own ``tasks.py`` or ``core/`` must be able to install memstrata
beside it (issue 15), so the wheel may hold no top-level ``core``/``tasks``/``ops``/
``beat_schedule``; the folders the user laid out reach it as ``memstrata.*`` through the
symlinks in ``memstrata/``.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LINKED = {"core": "core", "tasks": "tasks", "ops": "ops", "beat_schedule.py": "beat_schedule.py"}


def test_each_laid_out_folder_is_a_memstrata_subpackage() -> None:
    for link, target in LINKED.items():
        path = REPO / "memstrata" / link
        assert path.is_symlink(), f"memstrata/{link} must link to the top-level {target}"
        assert path.resolve() == (REPO / target).resolve()


def test_the_wheel_installs_only_the_memstrata_namespace(tmp_path: Path) -> None:
    # Given the wheel built from this checkout (no network: the venv's setuptools)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path), str(REPO)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("memstrata-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    # Then its top level is the package and its metadata only
    tops = {name.split("/")[0] for name in names}
    metadata = {t for t in tops if t.endswith(".dist-info")}
    assert len(metadata) == 1
    assert tops - metadata == {"memstrata"}
    # And it holds real copies of the linked folders and of their data files
    for expected in (
        "memstrata/beat_schedule.py",
        "memstrata/core/runtime.py",
        "memstrata/tasks/app.py",
        "memstrata/ops/cli/__init__.py",
        "memstrata/core/stm/lua/common.lua",
        "memstrata/core/extract/lexicons/rules.json",
        "memstrata/core/migrations/script.py.mako",
        "memstrata/ops/demo/en_debug_session.json",
    ):
        assert expected in names, expected
