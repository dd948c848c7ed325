"""The evsys command keeps third-party progress bars (transformers, datasets) off the terminal."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

DRAW_BARS = """
import evsys.cli  # what every evsys command imports first
from transformers.utils.logging import tqdm as transformers_tqdm
from datasets.utils.tqdm import tqdm as datasets_tqdm
for bar in (transformers_tqdm, datasets_tqdm):
    for _ in bar(range(3), desc="third-party bar"):
        pass
"""


@pytest.mark.needs_process
@pytest.mark.slow
def test_transformers_and_datasets_progress_bars_stay_silent():
    env = {k: v for k, v in os.environ.items() if "PROGRESS_BARS" not in k}
    done = subprocess.run(
        [sys.executable, "-c", DRAW_BARS], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "third-party bar" not in done.stderr + done.stdout
    control = subprocess.run(
        [sys.executable, "-c", DRAW_BARS.replace("import evsys.cli ", "pass ")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "third-party bar" in control.stderr  # positive control: the bars do draw without evsys
