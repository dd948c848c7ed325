"""Where the orchestrator's cgroup has no pids controller (a container or pod with partial delegation), a
sandbox still starts, its agent's process count is held by RLIMIT_NPROC of its own uid, and LIMITS is not
declared; a missing memory controller is reported, not refused."""

from __future__ import annotations

import dataclasses

import pytest

from evsys.records import SandboxSpec
from evsys.sandbox.base import Capability
from evsys.sandbox.local import delegation, limits
from evsys.sandbox.local import sandbox as local_sandbox
from evsys.sandbox.local.cgroups import CgroupLayout, detect_layout
from evsys.sandbox.local.sandbox import LocalSandbox

SLEEPERS = "pgrep -c -u agent || true"  # forked, whether or not exec(sleep) happened yet


@pytest.fixture
def without_pids(monkeypatch):
    """This process's cgroup layout minus the pids controller, as a pod delegating only memory gives it."""
    real = detect_layout()
    parents = {c: p for c, p in real.parents.items() if c != "pids"}
    layout = dataclasses.replace(real, parents=parents, missing={"pids": "not delegated (test)"})
    monkeypatch.setattr(local_sandbox, "_cgroup_layout", lambda: layout)
    return layout


async def _forks(spec: SandboxSpec) -> int:
    async with LocalSandbox(spec) as sb:
        await sb.exec("for i in $(seq 80); do sleep 30 & done 2>/dev/null; true", timeout=30)
        count = int((await sb.exec(SLEEPERS, user="root")).stdout.split()[0])
        await sb.kill_processes()
        return count


@pytest.mark.needs_sandbox
async def test_without_a_pids_cgroup_the_agents_processes_are_capped_by_its_uid_rlimit(without_pids):
    assert not LocalSandbox.supports(Capability.LIMITS)
    holds = {h.limit: h for h in limits.limit_holds(without_pids)}
    assert holds["pids_max"].by == limits.NPROC_FALLBACK and not holds["pids_max"].by_cgroup
    assert await _forks(SandboxSpec(name="nproc-fallback-big", pids_max=1024)) >= 80  # positive control
    capped = await _forks(SandboxSpec(name="nproc-fallback", pids_max=24))
    assert 0 < capped < 24


def test_a_missing_memory_controller_is_said_plainly():
    layout = CgroupLayout(2, {}, {"memory": "not delegated to evsys's cgroup /kubepods/x"})
    holds = {h.limit: h for h in limits.limit_holds(layout)}
    assert not holds["memory_mb"].enforced and holds["memory_mb"].note.startswith("NOT LIMITED")
    assert "/kubepods/x" in holds["memory_mb"].note
    assert holds["pids_max"].enforced and not holds["cpus"].enforced


def test_v2_controllers_come_from_evsyss_own_cgroup_not_the_roots(tmp_path):
    """A pod's cgroup offering only memory (the root offers everything): memory is enabled for the sandboxes
    below the pod's cgroup; pids and cpu are reported as not delegated there."""
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids\n")
    pod = tmp_path / "kubepods" / "pod1"
    pod.mkdir(parents=True)
    (pod / "cgroup.controllers").write_text("memory\n")
    (pod / "cgroup.subtree_control").write_text("\n")
    base, usable, why = delegation.enable_controllers(tmp_path, "/kubepods/pod1")
    assert base == pod and usable == ["memory"]
    assert (pod / "cgroup.subtree_control").read_text() == "+memory"
    assert set(why) == {"pids", "cpu"} and f"not delegated to evsys's cgroup {pod}" in why["pids"]
    # evsys already moved into its leaf (a second detection, a forked worker): the base is still the pod's
    assert delegation.delegated_base(tmp_path, f"/kubepods/pod1/{delegation.LEAF}") == pod
