"""The Modal backend through the real `modal` SDK against the Modal stand-in (modal_standin.py): what it asks
the service for, what it refuses up front, that the service's credentials stay out of the sandbox, and the
slot pool sharing Modal sandboxes. The conformance suite (tests/sandbox/conformance) checks the rest of the
contract through that stand-in."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from standins import STANDIN_IMAGE, environment

from evsys.records import Bind, ImageSpec, PodSpec, SandboxSpec
from evsys.sandbox import create_sandbox
from evsys.sandbox.base import Capability, SandboxError, SandboxUnsupported
from evsys.sandbox.modal.sandbox import APP_VAR, ModalSandbox
from evsys.sandbox.slots import SlotPool

pytestmark = pytest.mark.asyncio

api_pb2 = pytest.importorskip("modal_proto.api_pb2", reason="the modal extra is not installed")
BLOCKED, OPEN, ALLOWLIST = (
    api_pb2.NetworkAccess.NetworkAccessType.Value(name) for name in ("BLOCKED", "OPEN", "ALLOWLIST")
)


def spec(**fields: object) -> SandboxSpec:
    """A spec for these tests (unique name)."""
    fields.setdefault("name", f"modal-test-{os.getpid()}-{id(fields)}")
    return SandboxSpec(**fields)  # type: ignore[arg-type]


async def test_the_sandbox_is_asked_for_with_its_image_resources_network_and_tag(modal_standin):
    sized = spec(image=ImageSpec(ref=STANDIN_IMAGE), cpus=1.5, memory_mb=1024, network="public")
    box = create_sandbox(sized, "modal")
    async with box:
        assert (await box.exec("id -un")).stdout == "agent\n"
        sandbox_id = box._box.object_id
        assert sandbox_id in modal_standin.boxes
    assert sandbox_id not in modal_standin.boxes  # terminated on stop
    asked = modal_standin.created[-1]
    definition = asked.definition
    assert (definition.resources.milli_cpu, definition.resources.memory_mb) == (1500, 1024)
    assert definition.network_access.network_access_type == OPEN
    assert [(t.tag_name, t.tag_value) for t in asked.tags] == [("evsys.sandbox", sized.name)]
    assert asked.app_id == modal_standin.apps["evsys"]
    assert modal_standin.built[-1].dockerfile_commands == [f"FROM {STANDIN_IMAGE}"]
    async with ModalSandbox(spec()) as closed:
        assert (await closed.exec("echo up")).stdout == "up\n"
    assert modal_standin.created[-1].definition.network_access.network_access_type == BLOCKED


async def test_an_allowlist_becomes_modals_outbound_domain_and_cidr_allowlists(modal_standin):
    hosts = ["localhost", "10.1.2.3"]
    async with ModalSandbox(spec(network="allowlist", allowed_hosts=hosts)) as box:
        assert (await box.exec("true")).ok
    access = modal_standin.created[-1].definition.network_access
    assert access.network_access_type == ALLOWLIST
    assert (list(access.allowed_domains), list(access.allowed_cidrs)) == (["localhost"], ["10.1.2.3/32"])


async def test_the_app_is_the_configured_one_created_when_missing(modal_standin):
    with environment(**{APP_VAR: "evsys-other"}):
        async with ModalSandbox(spec()):
            pass
    assert modal_standin.created[-1].app_id == modal_standin.apps["evsys-other"]


async def test_an_image_modal_cannot_build_fails_with_the_services_reason(modal_standin):
    box = ModalSandbox(spec(image=ImageSpec(ref="registry.invalid/no-such:image")))
    with pytest.raises(SandboxError, match=r"cannot build from 'registry\.invalid/no-such:image'"):
        await box.start()
    await box.stop()


async def test_a_dockerfile_is_built_by_modal_from_its_own_lines(modal_standin, tmp_path: Path):
    dockerfile = tmp_path / "environment" / "Dockerfile"
    dockerfile.parent.mkdir()
    dockerfile.write_text(f"FROM {STANDIN_IMAGE}\n")
    from_dockerfile = spec(image=ImageSpec(ref="task (environment/Dockerfile)", dockerfile=dockerfile))
    before = len(modal_standin.built)
    async with ModalSandbox(from_dockerfile) as box:
        assert (await box.exec("id -un")).stdout == "agent\n"
    assert f"FROM {STANDIN_IMAGE}" in modal_standin.built_lines(before)
    dockerfile.write_text(f"FROM {STANDIN_IMAGE}\nRUN echo built-by-modal > /built\n")
    box = ModalSandbox(from_dockerfile.model_copy(update={"name": from_dockerfile.name + "-run"}))
    with pytest.raises(SandboxError, match="builds nothing but FROM lines, not 'RUN echo built-by-modal"):
        await box.start()  # the stand-in builds no RUN: it was handed the Dockerfile's own line
    await box.stop()


async def test_large_files_and_binary_bytes_travel_intact_both_ways(modal_standin, tmp_path: Path):
    payload = os.urandom(9 << 20)  # more than one stdin write (4 MiB each)
    (tmp_path / "blob.bin").write_bytes(payload)
    async with ModalSandbox(spec()) as box:
        await box.upload(tmp_path / "blob.bin", "/app/in/blob.bin")
        await box.exec("cp /app/in/blob.bin /app/out.bin", user="root")
        await box.download("/app/out.bin", tmp_path / "back.bin")
        assert (tmp_path / "back.bin").read_bytes() == payload


async def test_what_modal_cannot_do_is_refused_up_front(tmp_path: Path):
    refusals = {
        "bind mounts": spec(binds=[Bind(src=tmp_path, dst="/mnt/host")]),
        "pods": spec(pod=PodSpec(name="p", hostname="a", hosts=["a"])),
        "was built locally": spec(image=ImageSpec(ref="sha256-local", source="containers-storage:[x]y")),
    }
    for reason, refused in refusals.items():
        with pytest.raises(SandboxUnsupported, match=reason):
            ModalSandbox(refused)
    assert ModalSandbox.capabilities == {Capability.IMAGES, Capability.REMOTE_IMAGES}
    box = ModalSandbox(spec())  # never started: each is refused before any call to the service
    for call in (box.reset(), box.set_network("public"), box.spawn(["cat"])):
        with pytest.raises(SandboxUnsupported):
            await call


async def test_the_service_credentials_never_reach_the_sandbox(modal_standin):
    secret = os.environ["MODAL_TOKEN_SECRET"]
    assert secret == modal_standin.token_secret  # positive control: the orchestrator holds the token
    async with ModalSandbox(spec()) as box:
        seen = await box.exec("env; cat /proc/1/environ 2>/dev/null | tr '\\0' '\\n'", user="root")
        assert seen.ok and "PATH=" in seen.stdout
        assert secret not in seen.stdout and "MODAL_" not in seen.stdout
    assert all(secret not in repr(asked) for asked in modal_standin.created)


async def test_without_a_token_the_backend_says_how_to_configure_it(tmp_path: Path):
    with environment(MODAL_TOKEN_ID=None, MODAL_TOKEN_SECRET=None, MODAL_CONFIG_PATH=str(tmp_path / "none")):
        reason = await ModalSandbox.unavailable()
    assert reason is not None and "MODAL_TOKEN_ID" in reason


# Every slot leaves its marker, then waits for all ten of its sandbox: serialised calls never see them all.
BARRIER = (
    "mkdir -p -m 1777 /tmp/barrier 2>/dev/null; touch /tmp/barrier/{id}; for i in $(seq 1 600); do "
    "[ $(ls /tmp/barrier | wc -l) -ge 10 ] && echo together && exit 0; sleep 0.05; done; echo alone"
)


async def test_two_modal_sandboxes_serve_twenty_concurrent_slots_with_workspaces_of_their_own(modal_standin):
    pool = SlotPool(spec(name="modal-slots"), backend="modal", slots_per_sandbox=10)
    slots = []
    try:
        slots = await asyncio.gather(*(pool.acquire(f"traj-{i}") for i in range(20)))
        assert len({id(s.sandbox) for s in slots}) == 2
        assert len({(id(s.sandbox), s.uid) for s in slots}) == 20
        assert len(modal_standin.boxes) == 2  # two Modal sandboxes, no more
        modal_standin.peak_execs = 0
        writes = [(s, "write_file", {"path": "mine.txt", "content": s.trajectory_id}) for s in slots]
        barrier = [(s, "bash", {"command": BARRIER.format(id=i)}) for i, s in enumerate(slots)]
        results = await pool.execute_batch(writes + barrier)
        assert all(r.success for r in results), [r.error for r in results if not r.success]
        assert [r.output.strip() for r in results[20:]] == ["together"] * 20
        assert modal_standin.peak_execs >= 20  # all twenty ran at once, across both sandboxes
        reads = await pool.execute_batch([(s, "read_file", {"path": "mine.txt"}) for s in slots])
        assert [r.output for r in reads] == [f"traj-{i}" for i in range(20)]
        neighbour = slots[1].workspace
        control = await pool.exec_tool(slots[1], "bash", {"command": f"cat {neighbour}/mine.txt"})
        assert control.output == "traj-1"  # positive control: the file is there for its own slot
        peek = await pool.exec_tool(slots[0], "bash", {"command": f"cat {neighbour}/mine.txt"})
        assert not peek.success and "traj-1" not in peek.output
    finally:
        for slot in slots:
            await pool.release(slot)
        await pool.close()
    assert not modal_standin.boxes  # every Modal sandbox terminated
