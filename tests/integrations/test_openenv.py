"""OpenEnv 0.10 sessions over evsys trials (evsys.integrations.openenv).

OpenEnv 0.10 (`openenv` on PyPI) and openenv-core (in evsys's dev install, driving `evsys serve` in
tests) both ship the `openenv` module, so OpenEnv 0.10 lives in `.openenv-site` (scripts/bootstrap.sh) and
these tests run openenv_site/ in a process with it first on the path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SITE = REPO / ".openenv-site"


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.skipif(
    not (SITE / "openenv").is_dir(), reason=f"{SITE} is missing: scripts/bootstrap.sh makes it"
)
def test_openenv_sessions_under_openenv_0_10() -> None:
    path = [str(SITE), str(REPO / "src"), str(REPO / "tests" / "harness")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    argv = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(HERE / "openenv_site")]
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=1100)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout, done.stdout[-2000:]


def test_package_imports_without_openenv() -> None:
    code = (
        "import sys; sys.modules['openenv'] = None\n"
        "import evsys.integrations.openenv as o\n"
        "print(o.__all__)\n"
        "try:\n    o.EvsysSessionFactory\nexcept ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'openenv==0.10.*'" in out.stdout
    assert "EvsysSessionFactory" in out.stdout
