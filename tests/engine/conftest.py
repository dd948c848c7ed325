"""Fixtures for engine tests: small task directories in tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_tasks import MEMORY_PROGRAMS, make_task


@pytest.fixture
def task_factory(tmp_path: Path):
    """`task_factory(name, **parts)` writes a task under tmp_path/dataset and returns its path."""
    dataset = tmp_path / "dataset"
    dataset.mkdir()

    def factory(name: str, **parts) -> Path:
        return make_task(dataset, name, **parts)

    factory.dataset = dataset
    return factory


@pytest.fixture
def memory_sandbox(memory_backend) -> str:
    """An in-memory sandbox backend running the engine tests' scripts and agents (engine_tasks.py); its name,
    for `JobConfig(sandbox=...)`."""
    return memory_backend(MEMORY_PROGRAMS)
