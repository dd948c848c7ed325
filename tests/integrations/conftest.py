"""The integrations' tests reuse the datasets' test helpers (a registry of git-pinned datasets), imported by
file name."""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
if str(TESTS / "datasets") not in sys.path:  # test_dataset_registry
    sys.path.insert(0, str(TESTS / "datasets"))
