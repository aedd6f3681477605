"""Outside ``MEMSTRATA_PROFILE=dev``, settings refuse well-known default passwords."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import SecretStr, ValidationError

from memstrata.core.ltm.config import LtmSettings
from memstrata.core.settings import load_settings

CASES: dict[str, dict[str, Any]] = {
    "redis_url": {"redis_url": "redis://:redis@127.0.0.1:6379/0"},
    "postgres_url": {"postgres_url": "postgresql+psycopg://postgres:memstrata@db:5432/m"},
    "broker_url": {"broker_url": "redis://user:Password@127.0.0.1:6379/1"},
    "flower_password": {"flower_password": SecretStr("admin")},
    "ltm.milvus_token": {"ltm": LtmSettings(milvus_token=SecretStr("root:Milvus"))},
    "ltm.es_url": {"ltm": LtmSettings(es_url="http://elastic:changeme@es:9200")},
}


@pytest.mark.parametrize("field", sorted(CASES))
def test_a_default_password_is_refused_in_production(field: str) -> None:
    with pytest.raises(ValidationError, match=f"{field} uses a well-known default password"):
        load_settings(**CASES[field])


@pytest.mark.parametrize("field", sorted(CASES))
def test_the_dev_profile_accepts_it(field: str) -> None:
    assert load_settings(profile="dev", **CASES[field]).profile == "dev"


def test_real_passwords_and_none_at_all_are_accepted() -> None:
    ok = load_settings(
        redis_url="redis://:Zq81kf0s9a@127.0.0.1:6379/0",
        postgres_url="postgresql+psycopg://postgres@127.0.0.1:5432/test",
        flower_password=SecretStr("9f0aa1c2e3"),
        ltm=LtmSettings(milvus_token=SecretStr("root:7c1d0e9b"), es_url="http://es:9200"),
    )
    assert ok.profile == "production"
