"""The rule modules load no storage or network client when imported (DESIGN §1, §5).

lint-imports checks this statically ([tool.importlinter] in pyproject.toml); this test
measures it in a fresh interpreter, so an import through importlib is caught too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

RULE_MODULES = (
    "core.extract.rules",
    "core.extract.entities",
    "core.extract.lexicon",
    "core.policy.write",
    "core.recall.profile",
    "core.recall.route",
    "core.recall.pool",
    "core.recall.render",
    "core.lifecycle.policy",
    "core.lifecycle.batch",
    "core.lifecycle.forgetting",
    "core.lifecycle.generality",
    "core.lifecycle.states",
    "core.ltm.policy",
    "core.authority.domain",
    "core.authority.domain_authority",
    "core.authority.blocks",
    "core.compress.engine",
    "core.compress.tokens",
    "core.settings",
)
CLIENTS = ("redis", "sqlalchemy", "sqlmodel", "pymilvus", "elasticsearch", "httpx")

_PROBE = """
import importlib, json, sys
for name in sys.argv[2:]:
    importlib.import_module(name)
clients = set(json.loads(sys.argv[1]))
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in clients)))
"""


def test_importing_the_rule_modules_loads_no_client() -> None:
    # together: if all of them load none, none of them does alone
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(CLIENTS), *RULE_MODULES],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],  # the checkout under test
    ).stdout
    assert json.loads(out) == []
