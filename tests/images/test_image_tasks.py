"""Task directories whose Dockerfiles need a build, run end to end with the oracle: one behaviour each
(tests/images/tasks/), plus failing and slow builds, concurrent trials and a `docker_image` that cannot be
pulled."""

from __future__ import annotations

import hashlib
import json
import shutil
import uuid
from pathlib import Path

import pytest

from evsys.cli.progress import BuildActivity
from evsys.engine import AgentSpec, Job, JobConfig
from evsys.engine.events import BuildProgress
from evsys.images import ImageService
from evsys.images.bases import UBUNTU_KEYRINGS
from evsys.images.build import host_ca_bundle
from evsys.records import FailureCause

pytestmark = pytest.mark.timeout(1800)
TASKS = Path(__file__).parent / "tasks"


async def run_tasks(tmp_path: Path, names: list[str], **kw):
    dataset = tmp_path / "dataset"
    dataset.mkdir(exist_ok=True)
    for name in names:
        if not (dataset / name).exists():
            shutil.copytree(TASKS / name, dataset / name)
    kw.setdefault("n_concurrent", 2)
    config = JobConfig(
        datasets=[dataset], agents=[AgentSpec(name="oracle")], jobs_dir=tmp_path / "jobs", job_name="t", **kw
    )
    result = await Job(config).run()
    return result, config.job_dir


@pytest.mark.parametrize(
    "name", ["debian-run", "env-path", "multi-stage", "arg", "user-workdir", "dockerignore", "uv-stage"]
)
async def test_a_dockerfile_feature_builds_and_the_oracle_reaches_one(image_storage, tmp_path, name):
    result, _ = await run_tasks(tmp_path, [name])
    (trial,) = result.trials
    assert trial.failure is None, trial.failure
    assert trial.reward == 1.0
    assert trial.image is not None and trial.image.source in ("built", "cached")
    assert trial.image.ref.startswith(f"localhost/evsys/img-{name}:")
    assert not trial.ran_on_host_image


async def test_a_failing_run_is_its_own_cause_with_the_log_tail(image_storage, tmp_path):
    result, job_dir = await run_tasks(tmp_path, ["failing-run"])
    (trial,) = result.trials
    assert trial.failure is not None and trial.failure.cause == FailureCause.ENVIRONMENT_BUILD_FAILED
    assert "about to fail on purpose" in trial.failure.message
    assert trial.retries == []
    log = job_dir / trial.trial_name / "environment" / "build.log"
    assert "about to fail on purpose" in log.read_text()


async def test_build_timeout_sec_kills_the_build(image_storage, tmp_path):
    result, _ = await run_tasks(tmp_path, ["build-timeout"])
    (trial,) = result.trials
    assert trial.failure is not None and trial.failure.cause == FailureCause.ENVIRONMENT_BUILD_FAILED
    assert "timed out after 3 s" in trial.failure.message
    assert trial.timing.environment_build is not None and trial.timing.environment_build < 120


async def test_concurrent_trials_of_an_unbuilt_image_build_it_once(image_storage, tmp_path):
    dataset = tmp_path / "dataset"
    shutil.copytree(TASKS / "debian-run", dataset / "fresh")
    dockerfile = dataset / "fresh" / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + f"RUN echo {uuid.uuid4().hex} > /opt/unique\n")
    result, _ = await run_tasks(tmp_path, [], n_attempts=3, n_concurrent=3)
    sources = sorted(t.image.source for t in result.trials)
    assert sources == ["built", "cached", "cached"]
    assert {t.reward for t in result.trials} == {1.0}
    assert len({t.image.ref for t in result.trials}) == 1


async def test_a_build_reports_its_progress_on_the_jobs_event_stream(image_storage, tmp_path):
    """While a trial's image builds, `evsys run`'s progress display (subscribed to the job's events) names
    the task and the build's latest line; once the build ended it names none."""
    dataset = tmp_path / "dataset"
    shutil.copytree(TASKS / "debian-run", dataset / "fresh")
    marker = uuid.uuid4().hex
    dockerfile = dataset / "fresh" / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + f"RUN echo {marker} > /opt/unique\n")
    config = JobConfig(datasets=[dataset], agents=[AgentSpec(name="oracle")], jobs_dir=tmp_path / "jobs")
    job = Job(config)
    builds, shown = BuildActivity(), []

    def display(event: BuildProgress) -> None:
        builds.on_event(event)
        shown.append(builds.shown())

    job.events.subscribe(display)
    (trial,) = (await job.run()).trials
    assert trial.reward == 1.0 and trial.image.source == "built"
    assert any(line.startswith(f" | building {trial.task_name}: STEP 1/") for line in shown)
    assert any(marker in line for line in shown)  # the build's own output, live
    assert shown[-1] == "" and builds.running() == []


async def test_an_unpullable_docker_image_is_built_from_the_dockerfile_beside_it(image_storage, tmp_path):
    result, job_dir = await run_tasks(tmp_path, ["docker-image-fallback"])
    (trial,) = result.trials
    assert trial.reward == 1.0, trial.failure
    assert "127.0.0.1:9" in (trial.image.pull_error or "")
    saved = json.loads((job_dir / trial.trial_name / "result.json").read_text())
    assert saved["image"]["pull_error"] and saved["image"]["source"] in ("built", "cached")


def _files_containing(layers: list[Path], needle: bytes) -> list[Path]:
    found = []
    for layer in layers:
        for path in Path(layer).rglob("*"):
            if path.is_file() and not path.is_symlink() and needle in path.read_bytes():
                found.append(path)
    return found


async def test_the_host_ca_reaches_builds_but_not_the_image(image_storage, images, tmp_path):
    bundle = host_ca_bundle()
    if bundle is None:
        pytest.skip("the host has no CA bundle")
    context = tmp_path / "ctx"
    context.mkdir()
    (context / "Dockerfile").write_text(
        "FROM debian:bookworm-slim\n"
        f'RUN test -s "$SSL_CERT_FILE" && wc -c < "$SSL_CERT_FILE" > /opt/ca-size # {uuid.uuid4().hex}\n'
    )
    from evsys.images import BuildContext

    built = await images.build(BuildContext(context / "Dockerfile", context), name="ca-check")
    top = Path(built.spec.rootfs_layers[-1])
    assert int((top / "opt" / "ca-size").read_text()) == bundle.stat().st_size  # the build saw the bundle
    pem = bundle.read_bytes().split(b"-----END CERTIFICATE-----")[-2][-200:]  # the bundle's last cert
    assert _files_containing(built.spec.rootfs_layers, pem) == []
    assert not any(k in built.spec.config.env for k in ("SSL_CERT_FILE", "PIP_CERT", "REQUESTS_CA_BUNDLE"))


@pytest.mark.parametrize("network", ["public", "no-network"])
async def test_a_sandbox_on_an_image_with_network_trusts_the_host_ca(image_storage, tmp_path, network):
    """An image's own CA bundle lacks the certificates the host adds (a TLS-inspecting proxy's): a sandbox on
    an image with network gets the host's bundle at start, with the variables tools read; without network it
    gets neither. The bundle is a file placed at start, never part of the image."""
    bundle = host_ca_bundle()
    if bundle is None:
        pytest.skip("the host has no CA bundle")
    result, job_dir = await run_tasks(tmp_path, ["host-ca"], network=network)
    (trial,) = result.trials
    assert trial.failure is None, trial.failure
    assert trial.reward == 1.0 and trial.image is not None
    verifier = job_dir / trial.trial_name / "verifier"
    seen = (verifier / "ca-env.txt").read_text().splitlines()
    if network == "no-network":
        assert seen == [] and not (verifier / "ca.sha256").exists()
        return
    assert "SSL_CERT_FILE=/etc/evsys/host-ca.crt" in seen and "PIP_CERT=/etc/evsys/host-ca.crt" in seen
    assert (verifier / "ca.sha256").read_text().strip() == hashlib.sha256(bundle.read_bytes()).hexdigest()
    pem = bundle.read_bytes().split(b"-----END CERTIFICATE-----")[-2][-200:]
    image = await ImageService(pull_policy="never").storage.spec(trial.image.ref)
    assert _files_containing([Path(p) for p in image.rootfs_layers], pem) == []


def _have_ubuntu_keyring() -> bool:
    return any(Path(k).is_file() for k in UBUNTU_KEYRINGS)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["apt-install", "pip-install", "ubuntu"])
async def test_package_installs_and_other_bases(image_storage, tmp_path, name):
    """apt-get and pip during the build (network, the host CA), python:3.11-slim and ubuntu:24.04 bases (each
    synthesised once per machine, then cached)."""
    if name == "ubuntu" and not _have_ubuntu_keyring():
        pytest.skip("Ubuntu's archive keyring is missing (scripts/bootstrap.sh fetches it)")
    result, _ = await run_tasks(tmp_path, [name])
    (trial,) = result.trials
    assert trial.failure is None, trial.failure
    assert trial.reward == 1.0
