"""Sandbox backends by name: the registry, the `evsys.sandboxes` entry-point group, `--sandbox NAME` checked
before a job starts, and what callers do with a backend's capability flags."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conformance_backends import ExecDefaultsSandbox
from sandbox_helpers import spec

from evsys.agent.harness.sandboxed import SandboxLauncher, SpawnUnsupported
from evsys.engine.trial import classify_agent_exception
from evsys.records import FailureCause, ImageConfig, ImageSpec, SandboxSpec
from evsys.sandbox import (
    LocalSandbox,
    Sandbox,
    SandboxError,
    SandboxUnsupported,
    UnknownSandboxBackend,
    create_sandbox,
    register_sandbox,
    sandbox_backends,
    sandbox_class,
    unregister_sandbox,
)
from evsys.sandbox.pool import ReusePolicy, SandboxPool
from evsys.sandbox.registry import SANDBOXES

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "evsys.cli.main"]


@pytest.fixture
def plugin_dist(tmp_path, monkeypatch):
    """A third-party distribution on sys.path declaring `evsys.sandboxes` entry points; its module writes a
    marker file when it is imported."""
    site = tmp_path / "site"
    info = site / "evsys_plugin_demo-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: evsys-plugin-demo\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[evsys.sandboxes]\n"
        "demo = evsys_plugin_demo:DemoSandbox\n"
        "not-a-sandbox = evsys_plugin_demo:NotASandbox\n"
        "missing = evsys_plugin_nowhere:Gone\n"
    )
    marker = tmp_path / "imported"
    (site / "evsys_plugin_demo.py").write_text(
        "from pathlib import Path\n"
        "from evsys.sandbox import LocalSandbox\n"
        f"Path({str(marker)!r}).write_text('yes')\n"
        "class DemoSandbox(LocalSandbox):\n    pass\n"
        "class NotASandbox:\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(site))
    SANDBOXES.refresh()  # read the entry points again, as after a package is installed
    yield marker
    sys.modules.pop("evsys_plugin_demo", None)
    for name in ("demo", "not-a-sandbox", "missing"):
        SANDBOXES.unregister(name)
    SANDBOXES.refresh()


def test_entry_point_backends_are_listed_without_import_and_loaded_on_use(plugin_dist):
    assert {"local", "demo", "not-a-sandbox", "missing"} <= set(sandbox_backends())
    assert not plugin_dist.exists()  # listing imports nothing
    cls = sandbox_class("demo")
    assert plugin_dist.read_text() == "yes" and issubclass(cls, LocalSandbox)
    assert isinstance(create_sandbox(spec(), "demo"), cls)


def test_broken_entry_points_are_clear_errors(plugin_dist):
    with pytest.raises(SandboxUnsupported, match=r"'not-a-sandbox' is .*NotASandbox.*not a subclass"):
        sandbox_class("not-a-sandbox")
    with pytest.raises(
        SandboxUnsupported, match=r"'missing' from 'evsys_plugin_nowhere:Gone' .*could not be loaded"
    ):
        sandbox_class("missing")


def test_unknown_backends_list_the_available_ones_with_a_suggestion():
    with pytest.raises(
        UnknownSandboxBackend, match=r"'lcoal' \(did you mean 'local'\?\); available: .*local"
    ):
        create_sandbox(spec(), "lcoal")
    with pytest.raises(ValueError, match="unknown sandbox backend 'zzz'; available"):
        sandbox_class("zzz")


def test_registering_in_code_checks_the_class_and_names():
    register_sandbox("exec-defaults-test", ExecDefaultsSandbox)
    try:
        assert sandbox_class("exec-defaults-test") is ExecDefaultsSandbox
        with pytest.raises(ValueError, match="already registered"):
            register_sandbox("exec-defaults-test", LocalSandbox)
    finally:
        unregister_sandbox("exec-defaults-test")
    assert "exec-defaults-test" not in sandbox_backends()
    with pytest.raises(SandboxUnsupported, match="not a subclass"):
        register_sandbox("bad", dict)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="names are letters"):
        register_sandbox("has space", LocalSandbox)


def test_a_backend_missing_a_required_operation_cannot_be_built():
    class NoKill(Sandbox):
        async def start(self) -> None: ...
        async def exec(self, command, **kwargs): ...
        async def stop(self) -> None: ...

    with pytest.raises(TypeError, match="kill_processes"):
        NoKill(SandboxSpec(name="x"))  # type: ignore[abstract]


def test_a_spec_the_backend_cannot_provide_is_refused_at_creation():
    register_sandbox("exec-defaults-no-images", ExecDefaultsSandbox)  # declares no Capability.IMAGES
    try:
        with pytest.raises(SandboxUnsupported, match=r"images are not supported yet.*debian:bookworm"):
            create_sandbox(spec(image=ImageSpec(ref="debian:bookworm")), "exec-defaults-no-images")
    finally:
        unregister_sandbox("exec-defaults-no-images")
    assert create_sandbox(spec(image=ImageSpec(ref="debian:bookworm"))) is not None  # local runs images


def test_image_spec_round_trips_through_json():
    config = ImageConfig(env={"PATH": "/usr/bin"}, workdir="/app", user="1000", entrypoint=["/init"])
    image = ImageSpec(ref="python:3.13-slim", rootfs_layers=[Path("/l/0"), Path("/l/1")], config=config)
    with_image = SandboxSpec(name="t", image=image)
    again = SandboxSpec.model_validate_json(with_image.model_dump_json())
    assert again == with_image and again.image.config.env == {"PATH": "/usr/bin"}


@pytest.mark.needs_sandbox
async def test_the_pool_restarts_backends_that_cannot_reset():
    pool = SandboxPool(ExecDefaultsSandbox, reuse=ReusePolicy(max_idle=2))
    try:
        first = await pool.acquire(spec())
        await first.sandbox.exec("echo left > /app/left")
        await first.release()
        assert pool.idle_count == 0
        with pytest.raises(SandboxError, match="not running"):
            await first.sandbox.exec("true")  # stopped, not kept
        second = await pool.acquire(spec())
        assert second.sandbox is not first.sandbox and not second.reused
        assert (await second.sandbox.exec("ls -A /app")).stdout == ""
        await second.release()
        assert (pool.started, pool.reused) == (2, 0)
    finally:
        await pool.close()


async def test_harness_launchers_refuse_a_backend_without_streaming_processes():
    box = ExecDefaultsSandbox(spec())
    expected = r"stream processes \(spawn\); ExecDefaultsSandbox cannot"
    with pytest.raises(SpawnUnsupported, match=expected) as refused:
        SandboxLauncher(box)
    assert classify_agent_exception(refused.value) == FailureCause.ENVIRONMENT_UNSUPPORTED  # not retried
    SandboxLauncher(LocalSandbox(spec()))  # positive control: the local backend streams


@pytest.mark.needs_sandbox
def test_run_checks_the_sandbox_backend_before_creating_the_job(tmp_path):
    jobs = tmp_path / "jobs"
    argv = [*CLI, "run", str(REPO / "examples" / "tasks"), "--sandbox", "lcoal"]
    done = subprocess.run(
        [*argv, "--jobs-dir", str(jobs), "--job-name", "never"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 2, done.stderr
    assert (
        "unknown sandbox backend 'lcoal' (did you mean 'local'?); "
        "available: daytona, docker, e2b, local, modal" in done.stderr
    )
    assert not (jobs / "never").exists()


@pytest.mark.needs_sandbox
async def test_a_backend_with_only_the_required_operations_runs_whole_trials(tmp_path):
    from evsys.engine import Job, JobConfig

    register_sandbox("exec-defaults-jobs", ExecDefaultsSandbox)
    try:
        config = JobConfig(
            datasets=[REPO / "examples" / "tasks"],
            task_names=["create-file", "multi-key-reward"],
            sandbox="exec-defaults-jobs",
            jobs_dir=tmp_path,
            job_name="defaults",
            skip_build=True,  # a backend with no images: the examples' bases stand on the host rootfs
        )
        job = Job(config)
        result = await job.run()
    finally:
        unregister_sandbox("exec-defaults-jobs")
    assert [(t.failure, t.reward) for t in result.trials] == [(None, 1.0), (None, 1.0)]
    assert not any(t.sandbox_reused for t in result.trials)  # no reset: a fresh sandbox per trial
    for trial in result.trials:  # the oracle's output and the verifier's logs came out through copy_out
        trial_dir = job.store.trial_dir(trial.trial_name)
        assert (trial_dir / "agent" / "oracle.txt").is_file()
        assert list((trial_dir / "verifier").glob("reward.*"))
