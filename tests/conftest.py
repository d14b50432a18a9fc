"""Shared pytest fixtures (kept small and generic)."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    """A seeded random generator: every random draw in the tests is reproducible."""
    return np.random.default_rng(12345)
