"""The compose files validate (``docker-compose … config``, no engine needed) and hold the
production shape: every store with a health check, a one-shot migrate that every app
service waits for, one worker service per queue, exactly one Beat, Flower with auth, no
source bind mount, no default secret, and nothing published beyond 127.0.0.1.

``ops/run_tests.sh`` installs Debian's docker-compose when neither it nor the
``docker compose`` plugin is present.  Containers are never started here.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SECRETS = {
    "REDIS_PASSWORD": "r-1", "POSTGRES_PASSWORD": "p-2", "MINIO_ROOT_USER": "minio-user",
    "MINIO_ROOT_PASSWORD": "m-3", "MILVUS_ROOT_PASSWORD": "v-4", "ELASTIC_PASSWORD": "e-5",
    "MEMSTRATA_FLOWER_PASSWORD": "f-6",
}  # fmt: skip
APP = {"migrate", "api", "worker-ingest", "worker-ltm", "worker-maintenance", "beat", "flower",
       "metrics"}  # fmt: skip
FILES = {
    "docker-compose.yml": APP | {"redis", "postgres", "etcd", "minio", "milvus", "elasticsearch"},
    "docker-compose.embedded.yml": APP | {"redis", "postgres", "milvus"},
}
NEEDED = {
    "docker-compose.yml": set(SECRETS),
    "docker-compose.embedded.yml": {"REDIS_PASSWORD", "POSTGRES_PASSWORD",
                                    "MEMSTRATA_FLOWER_PASSWORD"},
}  # fmt: skip


@cache
def compose() -> list[str]:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    docker = shutil.which("docker")
    plugin = docker and subprocess.run([docker, "compose", "version"], capture_output=True)
    if docker and plugin and plugin.returncode == 0:
        return [docker, "compose"]
    pytest.fail("neither docker-compose nor `docker compose`: run bash ops/run_tests.sh, "
                "which installs Debian's docker-compose")  # fmt: skip


def run_config(name: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*compose(), "-f", str(ROOT / name), "config"], cwd=ROOT, capture_output=True,
        text=True, timeout=60, env={"PATH": "/usr/local/bin:/usr/bin:/bin", **env},
    )  # fmt: skip


@cache
def config(name: str) -> dict[str, Any]:
    out = run_config(name, SECRETS)
    assert out.returncode == 0, out.stderr
    loaded: dict[str, Any] = yaml.safe_load(out.stdout)
    return loaded


@pytest.mark.parametrize("name", sorted(FILES))
def test_the_file_validates_with_the_expected_services(name: str) -> None:
    assert set(config(name)["services"]) == FILES[name]


@pytest.mark.timeout(120)  # one `config` run per secret (~1 s each on a busy machine)
@pytest.mark.parametrize("name", sorted(FILES))
def test_every_secret_is_required_and_none_has_a_default(name: str) -> None:
    text = (ROOT / name).read_text(encoding="utf-8")
    for secret in sorted(NEEDED[name]):
        out = run_config(name, {k: v for k, v in SECRETS.items() if k != secret})
        assert out.returncode != 0 and secret in out.stderr, secret
        assert not re.search(rf"\$\{{{secret}:-", text), f"{secret} has a default"


@pytest.mark.parametrize("name", sorted(FILES))
def test_app_services_wait_for_migrate_and_the_healthy_stores(name: str) -> None:
    services = config(name)["services"]
    migrate = services["migrate"]
    assert migrate["command"] == ["migrate"] and migrate["restart"] == "no"
    stores = FILES[name] - APP
    for store in stores:
        assert "healthcheck" in services[store], store
    for role in APP - {"migrate"}:
        deps = services[role]["depends_on"]
        assert deps["migrate"]["condition"] == "service_completed_successfully", role
        healthy = {s for s, d in deps.items() if d["condition"] == "service_healthy"}
        assert healthy == stores - {"etcd", "minio"}, role  # Milvus' own stores


@pytest.mark.parametrize("name", sorted(FILES))
def test_one_worker_per_queue_one_beat_and_flower_with_auth(name: str) -> None:
    services = config(name)["services"]
    for queue in ("ingest", "ltm", "maintenance"):
        cmd = services[f"worker-{queue}"]["command"]
        assert cmd[:3] == ["worker", "-Q", queue], cmd
        assert "healthcheck" in services[f"worker-{queue}"]
    roles = [s["command"][0] for s in services.values() if isinstance(s.get("command"), list)]
    assert roles.count("beat") == 1
    assert "container_name" in services["beat"]  # `--scale beat=2` is refused
    flower = services["flower"]["environment"]
    assert flower["MEMSTRATA_FLOWER_PASSWORD"] == SECRETS["MEMSTRATA_FLOWER_PASSWORD"]
    assert services["api"]["command"] == ["api", "--host", "0.0.0.0", "--port", "8000"]
    assert "readyz" in " ".join(services["api"]["healthcheck"]["test"])


@pytest.mark.parametrize("name", sorted(FILES))
def test_one_image_no_source_mount_and_only_local_ports(name: str) -> None:
    services = config(name)["services"]
    images = {services[role]["image"] for role in APP}
    assert len(images) == 1 and images.pop().startswith("memstrata:")
    for svc_name, svc in services.items():
        for volume in svc.get("volumes", []):
            source = volume["source"] if isinstance(volume, dict) else volume.split(":")[0]
            if source.startswith(("/", ".")):  # a host path: only the Redis config, read-only
                assert source.endswith("ops/redis.conf"), (svc_name, volume)
        for port in svc.get("ports", []):
            published = port if isinstance(port, str) else f"{port.get('host_ip')}:{port}"
            assert published.startswith("127.0.0.1:"), (svc_name, port)
        env = svc.get("environment") or {}
        if svc_name in APP:
            assert env["MEMSTRATA_PROFILE"] == "production"


def test_production_stores_are_configured_safely() -> None:
    services = config("docker-compose.yml")["services"]
    redis = " ".join(services["redis"]["command"])
    assert "--requirepass" in redis and "redis.conf" in redis
    conf = (ROOT / "ops" / "redis.conf").read_text(encoding="utf-8")
    assert "appendonly yes" in conf and "maxmemory-policy noeviction" in conf
    es = services["elasticsearch"]["environment"]
    assert es["xpack.security.enabled"] == "true"
    assert es["ELASTIC_PASSWORD"] == SECRETS["ELASTIC_PASSWORD"] and "-Xmx" in es["ES_JAVA_OPTS"]
    milvus = services["milvus"]["environment"]
    assert milvus["COMMON_SECURITY_AUTHORIZATION_ENABLED"] == "true"
    app = services["worker-ltm"]["environment"]
    assert app["MEMSTRATA_LTM__LEXICAL_BACKEND"] == "elasticsearch"
    assert app["MEMSTRATA_LTM__MILVUS_URI"] == "http://milvus:19530"


def test_dockerfile_is_multi_stage_pinned_and_non_root() -> None:
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    base = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", text, re.M)
    assert base and re.fullmatch(r"python:3\.11\.\d+-slim-bookworm(@sha256:[0-9a-f]{64})?",
                                 base.group(1))  # fmt: skip
    assert len(re.findall(r"^FROM ", text, re.M)) == 2
    assert re.search(r"^USER memstrata", text, re.M)
    assert 'pip install ".${MEMSTRATA_EXTRAS}"' in text and "-e " not in text
