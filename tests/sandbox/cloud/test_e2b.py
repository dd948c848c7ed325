"""The E2B backend through the real `e2b` SDK against the E2B stand-in (e2b_standin.py): what it asks the
service for, what it refuses up front, and that the service's credentials stay out of the sandbox. The
conformance suite (tests/sandbox/conformance) checks the rest of the contract through that stand-in."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from standins import STANDIN_IMAGE, environment

from evsys.records import Bind, ImageSpec, PodSpec, SandboxSpec
from evsys.sandbox import create_sandbox
from evsys.sandbox.base import Capability, SandboxError, SandboxUnsupported
from evsys.sandbox.e2b.sandbox import TEMPLATE_VAR, E2BSandbox

pytestmark = pytest.mark.asyncio


def spec(**fields: object) -> SandboxSpec:
    """A spec for these tests (unique name)."""
    fields.setdefault("name", f"e2b-test-{os.getpid()}-{id(fields)}")
    return SandboxSpec(**fields)  # type: ignore[arg-type]


async def test_the_sandbox_is_asked_for_with_the_template_env_and_network(e2b_standin):
    box = create_sandbox(spec(env={"TASK": "yes"}, network="public"), "e2b")
    async with box:
        assert (await box.exec('echo "$TASK"; id -un')).stdout == "yes\nagent\n"
        box_id = box._box.sandbox_id
        assert box_id in e2b_standin.boxes
    asked = e2b_standin.created[-1]
    assert (asked["templateID"], asked["allow_internet_access"], asked["envVars"]) == (
        "base",
        True,
        {"TASK": "yes"},
    )
    assert asked["metadata"] == {"evsys.sandbox": box.spec.name}
    assert box_id not in e2b_standin.boxes  # killed on stop
    async with E2BSandbox(spec()) as closed:
        assert (await closed.exec("echo up")).stdout == "up\n"
    assert e2b_standin.created[-1]["allow_internet_access"] is False


async def test_an_image_becomes_a_template_built_with_the_specs_resources(e2b_standin):
    sized = spec(image=ImageSpec(ref=STANDIN_IMAGE), cpus=1.5, memory_mb=1024)
    async with E2BSandbox(sized) as box:
        assert (await box.exec("id -un")).stdout == "agent\n"
        name = e2b_standin.created[-1]["templateID"]
    builds = [b for b in e2b_standin.builds.values() if b["name"] == name]
    assert len(builds) == 1 and builds[0]["steps"]["fromImage"] == STANDIN_IMAGE
    assert (builds[0]["asked"]["cpuCount"], builds[0]["asked"]["memoryMB"]) == (2, 1024)
    async with E2BSandbox(sized.model_copy(update={"name": sized.name + "-again"})):
        pass
    assert len([b for b in e2b_standin.builds.values() if b["name"] == name]) == 1  # built once
    unbuildable = E2BSandbox(spec(image=ImageSpec(ref="registry.invalid/no-such:image")))
    with pytest.raises(SandboxError, match=r"cannot build from 'registry\.invalid/no-such:image'"):
        await unbuildable.start()
    await unbuildable.stop()


async def test_an_unknown_template_fails_with_the_services_reason(e2b_standin):
    with environment(**{TEMPLATE_VAR: "no-such-template"}):
        box = E2BSandbox(spec())
        with pytest.raises(SandboxError, match="template 'no-such-template' not found"):
            await box.start()
    await box.stop()


async def test_what_e2b_cannot_do_is_refused_up_front(tmp_path: Path):
    refusals = {
        "network mode 'allowlist'": spec(network="allowlist", allowed_hosts=["example.com"]),
        "bind mounts": spec(binds=[Bind(src=tmp_path, dst="/mnt/host")]),
        "pods": spec(pod=PodSpec(name="p", hostname="a", hosts=["a"])),
        "was built locally": spec(image=ImageSpec(ref="sha256-local", source="containers-storage:[x]y")),
    }
    for reason, refused in refusals.items():
        with pytest.raises(SandboxUnsupported, match=reason):
            E2BSandbox(refused)
    assert E2BSandbox.capabilities == {Capability.IMAGES, Capability.REMOTE_IMAGES}
    box = E2BSandbox(spec())  # never started: each is refused before any call to the service
    for call in (box.reset(), box.set_network("public"), box.spawn(["cat"])):
        with pytest.raises(SandboxUnsupported):
            await call


async def test_the_service_credentials_never_reach_the_sandbox(e2b_standin):
    key = os.environ["E2B_API_KEY"]
    assert key == e2b_standin.api_key  # positive control: the orchestrator holds the key
    async with E2BSandbox(spec()) as box:
        seen = await box.exec("env; cat /proc/1/environ 2>/dev/null | tr '\\0' '\\n'", user="root")
        assert seen.ok and "PATH=" in seen.stdout
        assert key not in seen.stdout and "E2B_" not in seen.stdout
    assert all(key not in repr(body) for body in e2b_standin.created)


async def test_without_an_api_key_the_backend_says_how_to_configure_it():
    with environment(E2B_API_KEY=""):
        os.environ.pop("E2B_API_KEY")
        reason = await E2BSandbox.unavailable()
    assert reason is not None and "E2B_API_KEY" in reason


async def test_a_dockerfile_copying_from_outside_its_directory_uploads_nothing(e2b_standin, tmp_path):
    (tmp_path / "secret.txt").write_text("a host file\n")
    context = tmp_path / "task" / "environment"
    context.mkdir(parents=True)
    (context / "Dockerfile").write_text(f"FROM {STANDIN_IMAGE}\nCOPY ../../secret.txt /stolen\n")
    assert (context / "../../secret.txt").resolve().read_text() == "a host file\n"  # positive control
    builds, uploads = len(e2b_standin.builds), len(e2b_standin.uploads)
    image = ImageSpec(ref="task (environment/Dockerfile)", dockerfile=context / "Dockerfile")
    box = E2BSandbox(spec(image=image))
    with pytest.raises(SandboxError, match="escapes the context directory"):
        await box.start()
    await box.stop()
    assert (len(e2b_standin.builds), len(e2b_standin.uploads)) == (builds, uploads)  # nothing sent
