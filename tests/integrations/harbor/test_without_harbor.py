"""evsys without Harbor (Harbor needs Python >= 3.12; evsys supports 3.11): the integration imports cleanly,
and asking for the environment class says which extra brings Harbor."""

from __future__ import annotations

import subprocess
import sys

from harbor_runs import REPO_ROOT

# Harbor made unimportable, whether or not this Python has it
WITHOUT_HARBOR = """
import sys
sys.modules["harbor"] = None
import evsys.integrations.harbor as integration
print(integration.EnvironmentRuntime.__name__)
try:
    integration.EvsysEnvironment
except ImportError as exc:
    print(exc)
"""


def test_the_integration_imports_without_harbor_and_names_the_extra():
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_HARBOR],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO_ROOT / "src")},
        check=True,
    )
    first, second = done.stdout.splitlines()
    assert first == "EnvironmentRuntime"
    assert second.startswith("EvsysEnvironment needs Harbor >= 0.25 (")
    assert second.endswith("): pip install 'evsys[harbor]' (Harbor needs Python >= 3.12)")
