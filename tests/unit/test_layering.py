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
    "memstrata.core.extract.rules",
    "memstrata.core.extract.entities",
    "memstrata.core.extract.lexicon",
    "memstrata.core.policy.write",
    "memstrata.core.recall.profile",
    "memstrata.core.recall.route",
    "memstrata.core.recall.pool",
    "memstrata.core.recall.render",
    "memstrata.core.lifecycle.policy",
    "memstrata.core.lifecycle.batch",
    "memstrata.core.lifecycle.forgetting",
    "memstrata.core.lifecycle.generality",
    "memstrata.core.lifecycle.states",
    "memstrata.core.ltm.policy",
    "memstrata.core.authority.domain",
    "memstrata.core.authority.domain_authority",
    "memstrata.core.authority.blocks",
    "memstrata.core.compress.engine",
    "memstrata.core.compress.tokens",
    "memstrata.core.settings",
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
