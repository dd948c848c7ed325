"""`evsys doctor`'s image rows: each names what is missing and how to get it, without failing the sandbox."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from typer.testing import CliRunner

from evsys.cli.main import app
from evsys.images import doctor as image_doctor


@pytest.mark.needs_images
def test_a_missing_image_tool_is_a_degraded_row_with_its_package(monkeypatch):
    real_which = shutil.which
    monkeypatch.setattr(
        image_doctor.shutil, "which", lambda name, *a, **k: None if name == "buildah" else real_which(name)
    )
    rows = {check.name: check for check in image_doctor.image_checks()}
    assert not rows["buildah"].ok and not rows["buildah"].required
    assert rows["buildah"].fix == "apt-get install buildah"
    assert "RUN" in rows["buildah"].detail
    assert rows["image cache"].ok


@pytest.mark.needs_sandbox
def test_doctor_shows_the_image_rows_in_their_own_table():
    result = CliRunner().invoke(app, ["doctor"], env={"COLUMNS": "200"})
    assert "environment images" in result.output
    for row in ("buildah", "skopeo", "mmdebstrap", "container registry", "image cache"):
        assert row in result.output


def test_a_long_registry_error_is_shortened_at_a_word_boundary_keeping_its_end(monkeypatch):
    error = (
        'level=fatal msg="Error parsing image name \\"docker://docker.io/library/debian:bookworm-slim\\": '
    )
    error += "pinging container registry registry-1.docker.io: Get https://registry-1.docker.io/v2/: "
    error += "dial tcp: lookup registry-1.docker.io on 10.255.255.53:53: no such host"
    failed = subprocess.CompletedProcess(["skopeo"], 1, stdout="", stderr=f"noise\n{error}\n")
    monkeypatch.setattr(image_doctor.shutil, "which", lambda name, *a, **k: f"/usr/bin/{name}")
    monkeypatch.setattr(image_doctor.subprocess, "run", lambda *a, **k: failed)
    check = image_doctor.check_registry()
    assert not check.ok and len(error) > 200  # positive control: the error is longer than a row shows
    shown = check.detail.removeprefix("docker.io unreachable (").split("); debian/")[0]
    assert shown.startswith("… ") and shown.endswith("no such host"), shown
    kept = shown.removeprefix("… ")
    assert error.endswith(kept) and error[-len(kept) - 1] == " ", shown  # whole words only
