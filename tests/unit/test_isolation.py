"""Two deployments (key namespaces) on one machine get different local defaults."""

from __future__ import annotations

import zlib
from pathlib import Path

from memstrata.core.ltm.config import LtmSettings
from memstrata.core.settings import derived_flower_port, embedded_milvus_uri, load_settings


def test_defaults_that_could_cross_derive_from_the_namespace() -> None:
    a, b = load_settings(key_namespace="team-a"), load_settings(key_namespace="team-b")
    assert (a.transcript_dir, b.transcript_dir) == (Path("var/team-a/transcripts"),
                                                    Path("var/team-b/transcripts"))  # fmt: skip
    assert a.flower_port != b.flower_port and 5555 < a.flower_port <= 5955
    assert a.ltm.milvus_uri != b.ltm.milvus_uri
    assert a.ltm.milvus_uri == embedded_milvus_uri("team-a")


def test_the_default_namespace_keeps_its_historical_values() -> None:
    s = load_settings()
    assert (s.transcript_dir, s.flower_port, s.ltm.milvus_uri) == (
        Path("var/transcripts"), 5555, "http://127.0.0.1:19530")


def test_explicit_values_win() -> None:
    s = load_settings(key_namespace="team-a", transcript_dir=Path("/srv/l0"), flower_port=6000,
                      ltm=LtmSettings(milvus_uri="http://milvus:19530"))  # fmt: skip
    assert (s.transcript_dir, s.flower_port, s.ltm.milvus_uri) == (
        Path("/srv/l0"), 6000, "http://milvus:19530")
    kept = load_settings(key_namespace="team-a", ltm=LtmSettings(history_enabled=False))
    assert kept.ltm.milvus_uri == embedded_milvus_uri("team-a") and not kept.ltm.history_enabled


def test_a_derived_flower_port_skips_the_ports_of_services_run_beside_memstrata() -> None:
    # Given namespaces whose crc32 slot is RabbitMQ's AMQPS (5671) or AMQP (5672) port
    # (a Celery broker is often on the same host: the port would be taken)
    assert [5556 + zlib.crc32(ns.encode()) % 400 for ns in ("t000719", "t000265")] == [
        5671, 5672]  # fmt: skip
    # Then each gets the next port up that no such service uses
    assert [derived_flower_port(ns) for ns in ("t000719", "t000265")] == [5673, 5673]
    assert load_settings(key_namespace="t000265").flower_port == 5673
    # And every other namespace keeps its port
    assert derived_flower_port("team-a") == 5556 + zlib.crc32(b"team-a") % 400
