"""`evsys doctor`'s image rows: each names what is missing and how to get it, without failing the sandbox."""

from __future__ import annotations

import shutil

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
