"""A job raises its process's descriptor limit to the hard limit, so the reserve servers keep is a small part
of a large range."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 4096))
from evsys.engine import JobStore
JobStore(sys.argv[1])
print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
"""


def test_a_job_store_raises_the_soft_descriptor_limit_to_the_hard_one(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path / "job")], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["4096"]
