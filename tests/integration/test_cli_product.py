"""The CLI follows the user (a subprocess per command, as a user types them).

The demo's printed follow-up lines (``ops.up.FOLLOW_UP``) run verbatim after an inline
demo and show the demo's data; tenants, users and API keys are managed end to end;
``--version`` answers; user errors are one line.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from memstrata import Memory, __version__
from memstrata.core.ids import user_key
from memstrata.core.ltm.config import LtmSettings
from memstrata.core.runtime import Runtime
from memstrata.core.settings import Settings, load_settings
from memstrata.ops.up import FOLLOW_UP
from tests.conftest import REDIS_URL
from tests.integration.conftest import REPO_ROOT, process_env
from tests.integration.test_cli_errors import one_line
from tests.integration.test_client import TURN, Kicks, drain
from tests.integration.test_lifecycle_env import lifecycle_pg

pytestmark = pytest.mark.integration
__all__ = ["lifecycle_pg"]
Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def settings(namespace: str, tmp_path: Path, lifecycle_pg: str) -> Settings:
    return load_settings(
        redis_url=REDIS_URL,
        key_namespace=namespace,
        transcript_dir=tmp_path / "transcripts",
        postgres_url=lifecycle_pg,
        ltm=LtmSettings(enabled=False),
    )


@pytest.fixture
def cli(settings: Settings, res: Runtime) -> Iterator[Run]:
    def run(line: str | list[str], **env: str) -> tuple[int, str, str]:
        args = shlex.split(line) if isinstance(line, str) else line
        assert args[0] == "memstrata"
        proc = subprocess.run(
            [sys.executable, "-m", "memstrata.ops.cli", *args[1:]], cwd=REPO_ROOT,
            env=process_env(settings, env), capture_output=True, text=True, timeout=180,
            check=False,
        )  # fmt: skip
        return proc.returncode, proc.stdout, proc.stderr

    yield run


def test_the_demo_follow_up_commands_work_verbatim(cli: Run) -> None:
    run = cli
    code, out, err = run("memstrata demo --inline")
    assert code == 0, err[-2000:]
    lines = [ln.strip() for ln in FOLLOW_UP.splitlines() if ln.strip().startswith("memstrata ")]
    assert len(lines) == 4
    outputs = {}
    for line in lines:
        code, out, err = run(line)
        assert code == 0 and "Traceback" not in err, (line, err)
        outputs[line.split()[1]] = out
    first = outputs["inspect"].splitlines()[0]
    assert "tenant demo" in first and not first.endswith(": 0 item(s), newest first"), first
    assert "Write decisions of user demo-zh (tenant demo)" in outputs["explain"]
    assert ": 0 " not in outputs["explain"].splitlines()[0]
    assert "tokens" in outputs["compress"] and "no transcript" not in outputs["compress"]
    sweep = outputs["sweep"]
    assert "dry run: a sweep in 1d would remove" in sweep and "demo/demo-" in sweep


def test_inspect_json_shows_the_external_user_id(cli: Run, res: Runtime, namespace: str) -> None:
    # Given a turn of 张三 (stored under an encoded key part), drained into STM
    t = "ext-" + namespace
    with Memory(runtime=res, tenant=t, kicker=Kicks()) as m:
        m.record_turn(user_id="张三", session_id="s1", messages=TURN)
    drain(res)
    # When inspect --json lists the items
    code, out, err = cli(["memstrata", "inspect", "--tenant", t, "--user", "张三", "--json"])
    # Then each names the user as given, not as stored
    assert code == 0, err
    items = json.loads(out)
    assert items and {i["user_id"] for i in items} == {"张三"} != {user_key("张三")}


def test_inspect_ltm_lists_the_long_term_cards(cli: Run, res: Runtime, namespace: str) -> None:
    # Given an episode card, an entity card and a superseded card of 张三
    from memstrata.core.ltm.card import CardDraft, CardStatus

    t, key = "ltm-" + namespace, user_key("张三")
    res.owners.ensure(t, key)

    def card(n: int, kind: str, text: str, status: CardStatus = CardStatus.ACTIVE) -> str:
        named = ["ltm_a", "ltm_b"] if kind == "entity" else []
        draft = CardDraft(tenant_id=t, user_id=key, canonical_key=f"{kind}:{n}",
                          memory_type=kind, title=text[:40], summary=text, source_type=kind,
                          source_message_ids=[f"m{n}"], status=status,
                          source_card_ids=named)  # fmt: skip
        return res.ledger.write(draft, now=1_700_000_000.0 + n).memory_id

    episode = card(1, "episode", "My sister Anna keeps 3 horses")
    entity = card(2, "entity", "Anna: My sister Anna keeps 3 horses | Anna ran a marathon")
    old = card(3, "episode", "My sister Anna keeps 2 horses", CardStatus.SUPERSEDED)
    # When inspect --ltm lists them: the active ones, most recently changed first
    code, out, err = cli(["memstrata", "inspect", "--tenant", t, "--user", "张三", "--ltm"])
    assert code == 0, err
    assert "2 card(s)" in out.splitlines()[0], out
    assert out.index(entity) < out.index(episode) and old not in out
    assert "Anna ran a marathon" in out and "1 source message(s), names 2 card(s)" in out
    # ... by type, as JSON with the user as given
    code, out, err = cli(["memstrata", "inspect", "--tenant", t, "--user", "张三", "--ltm",
                          "--type", "entity", "--json"])  # fmt: skip
    shown = json.loads(out)
    assert code == 0 and [c["memory_id"] for c in shown] == [entity], err
    assert shown[0]["user_id"] == "张三" and "bm25_text" not in shown[0]
    # ... and with --all the superseded card too
    code, out, _ = cli(["memstrata", "inspect", "--tenant", t, "--user", "张三", "--ltm", "--all"])
    assert code == 0 and old in out and "[superseded]" in out
    # a filter LTM cards do not have is a one-line error
    code, out, err = cli(["memstrata", "inspect", "--tenant", t, "--user", "张三", "--ltm",
                          "--session", "s1"])  # fmt: skip
    assert code != 0 and "filters by --type only" in err and "Traceback" not in err


def test_tenants_users_and_api_keys_from_the_cli(cli: Run, namespace: str) -> None:
    run = cli
    t = "acme-" + namespace
    assert run(f"memstrata tenant create {t} --name Acme")[0] == 0
    code, out, _ = run("memstrata tenant list")
    assert code == 0 and t in out
    code, out, err = run(["memstrata", "user", "create", "张三", "--tenant", t])
    assert code == 0 and "key part ~" in out, err
    code, out, _ = run(["memstrata", "user", "show", "张三", "--tenant", t])
    assert code == 0 and "user 张三 of tenant" in out
    code, out, _ = run(f"memstrata apikey create --tenant {t} --scope read,write,admin")
    assert code == 0
    secret = out.strip().splitlines()[-1]
    assert secret.startswith("msk_")
    key_id = secret.split("_")[1]
    code, out, _ = run(f"memstrata apikey list --tenant {t}")
    assert key_id in out and "active" in out and secret not in out
    assert run(f"memstrata apikey revoke {key_id}")[0] == 0
    assert "revoked" in run(f"memstrata apikey list --tenant {t}")[1]
    code, out, _ = run(["memstrata", "user", "erase", "张三", "--tenant", t])
    assert code == 0 and "removed" in out
    code, _, err = run(["memstrata", "user", "show", "张三", "--tenant", t])
    assert code == 1 and one_line(err) == f"memstrata user: no user '张三' in tenant '{t}'"


@pytest.mark.parametrize(
    ("line", "env", "expected"),
    [
        ("memstrata recall '' --user u --session s", {},
         "memstrata recall: query: String should have at least 1 character"),
        ("memstrata inspect --user u", {"MEMSTRATA_TENANT": "a b"},
         "memstrata inspect: tenant: invalid tenant 'a b': expected 1-128 chars "
         "of [A-Za-z0-9_.-]"),
        ("memstrata user show nobody@example.com", {},
         "memstrata user: no user 'nobody@example.com' in tenant 'default'"),
        ("memstrata apikey create --tenant no-such-tenant", {},
         "memstrata apikey: no tenant 'no-such-tenant' (memstrata tenant create first)"),
        ("memstrata tenant create", {},
         "memstrata tenant: tenant create: name the tenant, e.g. memstrata tenant create acme"),
    ],
)  # fmt: skip
def test_user_errors_are_one_line(cli: Run, line: str, env: dict[str, str], expected: str) -> None:
    code, _, err = cli(line, **env)
    assert code == 1 and one_line(err) == expected


def test_postgres_down_is_one_line(cli: Run) -> None:
    code, _, err = cli(
        "memstrata tenant list",
        MEMSTRATA_POSTGRES_URL="postgresql+psycopg://postgres:pw@127.0.0.1:1/x",
        MEMSTRATA_POSTGRES_TIMEOUT_S="2",
    )
    line = one_line(err)
    assert code == 1 and line.startswith("memstrata tenant: list tenants: PostgreSQL unavailable")
    assert "pw@" not in line


def test_version(cli: Run) -> None:
    code, out, _ = cli("memstrata --version")
    assert code == 0 and out.strip() == f"memstrata {__version__}"
