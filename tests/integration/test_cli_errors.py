"""``memstrata recall`` as a user runs it (a subprocess): one clear line, never a traceback.

Bad input and bad settings print the first problem's field and message; a store that
is down prints what is wrong without the password of its URL; PostgreSQL down is not an
error at all, since recall degrades instead.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping

import pytest

from memstrata.core.ltm.config import LtmSettings
from memstrata.core.ltm.milvus_server import free_port
from memstrata.core.settings import Settings
from tests.integration.conftest import REPO_ROOT, process_env

pytestmark = pytest.mark.integration

SECRET = "S3cretPw"
ASK = ["recall", "那个接口还是超时", "--user", "u1", "--session", "s1"]


def cli(settings: Settings, args: list[str], env: Mapping[str, str] | None = None) -> tuple[
    int, str, str
]:  # fmt: skip
    quiet = settings.model_copy(update={"ltm": LtmSettings(enabled=False)})
    proc = subprocess.run(
        [sys.executable, "-m", "memstrata.ops.cli", *args], cwd=REPO_ROOT,
        env=process_env(quiet, env),
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    return proc.returncode, proc.stdout, proc.stderr


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--tenant", "a b"], "memstrata recall: tenant_id: invalid id 'a b': expected 1-128 "
                              "chars of [A-Za-z0-9_.-]"),
        (["--task", "../etc"], "memstrata recall: task_id: invalid id '../etc': expected "
                               "1-128 chars of [A-Za-z0-9_.-]"),
        (["--budget", "-1"], "memstrata recall: token_budget: Input should be greater than or "
                             "equal to 32"),
        (["--top-k", "0"], "memstrata recall: top_k: Input should be greater than or equal to 1"),
    ],
)  # fmt: skip
def test_bad_recall_input_prints_its_field_and_problem_on_one_line(
    settings: Settings, args: list[str], line: str
) -> None:
    code, out, err = cli(settings, [*ASK, *args])
    assert (code, out) == (1, "")
    assert one_line(err) == line


def test_an_empty_query_is_one_line_too(settings: Settings) -> None:
    code, _out, err = cli(settings, ["recall", "", "--user", "u1", "--session", "s1"])
    assert code == 1
    assert one_line(err) == "memstrata recall: query: String should have at least 1 character"


def test_a_bad_setting_is_named_without_a_traceback(settings: Settings) -> None:
    code, _out, err = cli(settings, ASK, {"MEMSTRATA_RECALL_BREAKER_COOLDOWN_S": "-1"})
    assert code == 1
    assert one_line(err) == (
        "memstrata recall: recall_breaker_cooldown_s: Input should be greater than 0"
    )


def test_redis_down_is_one_line_and_never_shows_the_password(settings: Settings) -> None:
    # Given a Redis URL with a password, on a port nothing listens on
    url = f"redis://:{SECRET}@127.0.0.1:{free_port()}/0"
    code, out, err = cli(settings, ASK, {"MEMSTRATA_REDIS_URL": url})
    # Then one line names the masked URL and the way out
    assert code == 1
    line = one_line(err)
    assert line.startswith("memstrata recall: Redis is not reachable at redis://:***@127.0.0.1:")
    assert SECRET not in out + err


def test_postgres_down_degrades_the_recall_instead_of_failing_it(settings: Settings) -> None:
    # Given a PostgreSQL URL with a password, on a port nothing listens on
    url = f"postgresql+psycopg://memstrata:{SECRET}@127.0.0.1:{free_port()}/memstrata"
    code, out, err = cli(
        settings, ASK, {"MEMSTRATA_POSTGRES_URL": url, "MEMSTRATA_POSTGRES_TIMEOUT_S": "1"}
    )
    # Then the block is printed and the authority layer is named as degraded
    assert code == 0, err
    assert "degraded: {'authority': 'AuthorityUnavailable: " in out
    assert "Traceback" not in err
    assert SECRET not in out + err
