"""Fixtures for the training tests: the demo tiny model and the GRPO example's modules."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from evsys.testing.tiny_model import DEMO_RECIPE, build_tiny_model

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train"


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """The demo tiny model (greets for DEMO_GREETING; built once, then cached)."""
    return build_tiny_model(DEMO_RECIPE)


@pytest.fixture(scope="session")
def example() -> Path:
    """examples/train, importable (`import grpo`, `import digits`) for the tests that drive the loop; torch on
    one thread, as the example runs (several intra-op threads on a busy 2-core machine are far slower)."""
    import torch

    torch.set_num_threads(1)
    if str(EXAMPLE) not in sys.path:
        sys.path.insert(0, str(EXAMPLE))
    return EXAMPLE
