"""Flower refuses a short password outside the dev profile (review D8: 1 character was accepted)."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from memstrata.core.settings import load_settings
from memstrata.ops.procs import MIN_FLOWER_PASSWORD_CHARS, flower_env


@pytest.mark.parametrize("password", ["x", "x1y2z3", "a" * (MIN_FLOWER_PASSWORD_CHARS - 1)])
def test_a_short_password_is_refused(password: str) -> None:
    with pytest.raises(ValueError, match=f"shorter than {MIN_FLOWER_PASSWORD_CHARS}"):
        flower_env(load_settings(flower_password=SecretStr(password)))


def test_a_long_password_is_passed_to_flower_and_dev_accepts_a_short_one() -> None:
    long = "Zq81kf0s9aQ2"
    assert flower_env(load_settings(flower_password=SecretStr(long))) == {
        "FLOWER_BASIC_AUTH": f"admin:{long}"
    }
    dev = load_settings(profile="dev", flower_password=SecretStr("x"))
    assert flower_env(dev)["FLOWER_BASIC_AUTH"].endswith(":x")
