"""These tests import verifiers, which lives in its own virtualenv (`.venv-verifiers`, made by
scripts/bootstrap.sh): tests/integrations/test_verifiers.py runs this directory there. Collected in a
virtualenv without verifiers they skip."""

from __future__ import annotations

import importlib.util

collect_ignore_glob = [] if importlib.util.find_spec("verifiers") else ["test_*.py"]
