"""These tests import OpenEnv 0.10, which shares its `openenv` module with openenv-core (in evsys's dev
install): tests/integrations/test_openenv.py runs this directory with `.openenv-site` (made by
scripts/bootstrap.sh) first on the path. Collected without OpenEnv 0.10 they are left out."""

from __future__ import annotations

import importlib.util

try:
    _found = importlib.util.find_spec("openenv.core.harness.training") is not None
except ImportError:
    _found = False
collect_ignore_glob = [] if _found else ["test_*.py"]
