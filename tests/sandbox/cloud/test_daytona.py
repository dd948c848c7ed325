"""The Daytona backend through the real `daytona` SDK against the Daytona stand-in (daytona_standin.py): what
it asks the service for, what it refuses up front, and that the service's credentials stay out of the sandbox.
The conformance suite (tests/sandbox/conformance) checks the rest of the contract through that stand-in."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from standins import STANDIN_IMAGE, environment

from evsys.records import Bind, ImageSpec, PodSpec, SandboxSpec
from evsys.sandbox import create_sandbox
from evsys.sandbox.base import Capability, SandboxError, SandboxUnsupported
from evsys.sandbox.daytona.sandbox import DaytonaSandbox

pytestmark = pytest.mark.asyncio


def spec(**fields: object) -> SandboxSpec:
    """A spec for these tests (unique name)."""
    fields.setdefault("name", f"daytona-test-{os.getpid()}-{id(fields)}")
    return SandboxSpec(**fields)  # type: ignore[arg-type]


async def test_the_sandbox_is_asked_for_with_the_specs_image_resources_and_network(daytona_standin):
    box = create_sandbox(
        spec(
            image=ImageSpec(ref=STANDIN_IMAGE),
            cpus=1.5,
            memory_mb=1500,
            env={"TASK": "yes"},
            network="public",
        ),
        "daytona",
    )
    async with box:
        assert (await box.exec('echo "$TASK"; id -un')).stdout == "yes\nagent\n"
    asked = daytona_standin.created[-1]
    assert asked["buildInfo"]["dockerfileContent"].split()[:2] == ["FROM", STANDIN_IMAGE]
    assert (asked["cpu"], asked["memory"], asked["networkBlockAll"], asked["user"]) == (2, 2, False, "root")
    assert asked["env"] == {"TASK": "yes"} and asked["labels"]["evsys.sandbox"] == box.spec.name
    assert daytona_standin.boxes[_id_of(daytona_standin, box.spec.name)].record["state"] == "destroyed"


async def test_no_network_is_daytonas_block_all(daytona_standin):
    async with DaytonaSandbox(spec()) as box:
        assert (await box.exec("echo up")).stdout == "up\n"
    assert daytona_standin.created[-1]["networkBlockAll"] is True


async def test_an_image_the_service_cannot_build_fails_with_its_reason(daytona_standin):
    box = DaytonaSandbox(spec(image=ImageSpec(ref="registry.invalid/no-such:image")))
    with pytest.raises(SandboxError, match=r"cannot build 'FROM registry\.invalid/no-such:image"):
        await box.start()
    await box.stop()
    assert daytona_standin.created[-1]["buildInfo"]["dockerfileContent"].startswith("FROM registry.invalid")


async def test_what_daytona_cannot_do_is_refused_up_front(tmp_path: Path):
    refusals = {
        "network mode 'allowlist'": spec(network="allowlist", allowed_hosts=["example.com"]),
        "bind mounts": spec(binds=[Bind(src=tmp_path, dst="/mnt/host")]),
        "pods": spec(pod=PodSpec(name="p", hostname="a", hosts=["a"])),
        "was built locally": spec(image=ImageSpec(ref="sha256-local", source="containers-storage:[x]y")),
    }
    for reason, refused in refusals.items():
        with pytest.raises(SandboxUnsupported, match=reason):
            DaytonaSandbox(refused)
    assert DaytonaSandbox.capabilities == {Capability.IMAGES, Capability.REMOTE_IMAGES}
    box = DaytonaSandbox(spec())  # never started: each is refused before any call to the service
    for call in (box.reset(), box.set_network("public"), box.spawn(["cat"])):
        with pytest.raises(SandboxUnsupported):
            await call
    with pytest.raises(SandboxUnsupported, match="private verifier"):
        await box.run_verifier(["true"], tests=b"", output_file="/logs/verifier/out", user="root")


async def test_the_service_credentials_never_reach_the_sandbox(daytona_standin):
    key = os.environ["DAYTONA_API_KEY"]
    assert key == daytona_standin.api_key  # positive control: the orchestrator holds the key
    async with DaytonaSandbox(spec()) as box:
        seen = await box.exec("env; cat /proc/1/environ 2>/dev/null | tr '\\0' '\\n'", user="root")
        assert seen.ok and "PATH=" in seen.stdout
        assert key not in seen.stdout and "DAYTONA" not in seen.stdout
    assert all(key not in repr(body) for body in daytona_standin.created)


async def test_without_credentials_the_backend_says_how_to_configure_it(tmp_path: Path):
    with environment(DAYTONA_API_KEY="", DAYTONA_JWT_TOKEN="", HOME=str(tmp_path)):
        os.environ.pop("DAYTONA_API_KEY")
        os.environ.pop("DAYTONA_JWT_TOKEN")
        reason = await DaytonaSandbox.unavailable()
    assert reason is not None and "DAYTONA_API_KEY" in reason


def _id_of(standin, name: str) -> str:
    return next(box_id for box_id, box in standin.boxes.items() if box.record["name"] == name)


async def test_a_dockerfile_copying_from_outside_its_directory_uploads_nothing(daytona_standin, tmp_path):
    (tmp_path / "secret.txt").write_text("a host file\n")
    context = tmp_path / "task" / "environment"
    context.mkdir(parents=True)
    (context / "Dockerfile").write_text(f"FROM {STANDIN_IMAGE}\nCOPY ../../secret.txt /stolen\n")
    daytona = pytest.importorskip("daytona")
    escaping = daytona.Image.from_dockerfile(context / "Dockerfile")._context_list  # positive control
    assert [c.archive_path for c in escaping] == ["../../secret.txt"]  # it would upload the host file
    before = len(daytona_standin.created)
    image = ImageSpec(ref="task (environment/Dockerfile)", dockerfile=context / "Dockerfile")
    box = DaytonaSandbox(spec(image=image))
    with pytest.raises(SandboxError, match="outside the build context"):
        await box.start()
    await box.stop()
    assert len(daytona_standin.created) == before  # the service was never asked
