"""Fixtures shared by unit tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture
def blas() -> Iterator[Any]:
    """numpy's BLAS libraries as threadpoolctl drives them (a ``ThreadpoolController``
    selection; skipped where it sees none), each put back at its thread count after."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    libs = threadpoolctl.ThreadpoolController().select(user_api="blas")
    if not libs.lib_controllers:
        pytest.skip("numpy has no BLAS threadpoolctl can see")
    before = [lib.num_threads for lib in libs.lib_controllers]
    yield libs
    for lib, threads in zip(libs.lib_controllers, before, strict=True):
        lib.set_num_threads(threads)
