"""A verifier that installs a package with apt on a Debian image (apt's temp directory of links, issue 42)."""

from __future__ import annotations

import pytest
from test_image_tasks import run_tasks

pytestmark = pytest.mark.slow


async def test_apt_installs_a_package_in_the_verifier(image_storage, tmp_path):
    result, job_dir = await run_tasks(tmp_path, ["apt-verifier"])
    (trial,) = result.trials
    output = (job_dir / trial.trial_name / "verifier" / "test-stdout.txt").read_text()
    assert trial.failure is None, (trial.failure, output)
    assert trial.reward == 1.0, output
    # dpkg got the package through apt's directory of links
    assert "Preparing to unpack .../0-evsys-probe_1.0_all.deb" in output, output
    assert "Too many levels of symbolic links" not in output, output
