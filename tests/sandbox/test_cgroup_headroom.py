"""The nested cgroup layout a local sandbox's setup step writes (sandbox/local/cgsetup.py), on cgroup v1 and
v2: the agent's limits as asked, the sandbox's own with the reserve, the machinery joined outside the agent's
limits, and the daemon handed the agent's and the verifier's cgroup files. Pure: no cgroup is touched (this
machine runs v1; v2 is what users' machines have)."""

from __future__ import annotations

from pathlib import Path

from evsys.sandbox.local.cgroups import CgroupLayout, SandboxCgroup
from evsys.sandbox.local.cgsetup import PIDS_RESERVE, daemon_arguments
from evsys.sandbox.local.exhaustion import exhaustion_evidence

MB = 1024 * 1024


def _items(layout: CgroupLayout, **limits) -> list[str]:
    cg = SandboxCgroup(layout, "sb")
    return cg.setup_items(memory_mb=limits.get("memory_mb", 256), pids_max=100, cpus=limits.get("cpus"))


def test_v2_enables_the_children_sets_each_scope_and_joins_only_the_machinery():
    base = Path("/sys/fs/cgroup/evsys")
    layout = CgroupLayout(2, {"memory": base, "pids": base, "cpu": base})
    items = _items(layout, cpus=1.0)
    assert items[0] == f"set=+memory +pids:{base}/sb/cgroup.subtree_control"  # before any child's limit
    assert f"set={(256 + 128) * MB}:{base}/sb/memory.max" in items
    assert f"set={256 * MB}:{base}/sb/agent/memory.max" in items
    assert f"set={256 * MB}:{base}/sb/verifier/memory.max" in items
    assert f"set={100 + PIDS_RESERVE}:{base}/sb/pids.max" in items
    assert f"set=100:{base}/sb/agent/pids.max" in items and f"set=100000 100000:{base}/sb/cpu.max" in items
    assert [i for i in items if i.startswith("join=")] == [f"join={base}/sb/machinery/cgroup.procs"]
    assert [i for i in items if i.startswith("fd=")] == [
        f"fd=200:{base}/sb/agent/cgroup.procs",
        f"fd=201:{base}/sb/verifier/cgroup.procs",
    ]
    assert daemon_arguments(SandboxCgroup(layout, "sb")) == ["200/201"]


def test_v1_nests_memory_and_pids_and_keeps_cpu_and_freezer_flat():
    parents = {c: Path(f"/sys/fs/cgroup/{c}") for c in ("memory", "pids", "cpu", "freezer")}
    items = _items(CgroupLayout(1, parents), memory_mb=4096)
    assert not any("subtree_control" in i for i in items)
    assert (
        f"set={(4096 + 1024) * MB}:/sys/fs/cgroup/memory/sb/memory.limit_in_bytes" in items
    )  # reserve <= 1 GiB
    assert f"set={4096 * MB}:/sys/fs/cgroup/memory/sb/agent/memory.limit_in_bytes" in items
    assert sorted(i for i in items if i.startswith("join=")) == [
        "join=/sys/fs/cgroup/cpu/sb/cgroup.procs",
        "join=/sys/fs/cgroup/freezer/sb/cgroup.procs",
        "join=/sys/fs/cgroup/memory/sb/machinery/cgroup.procs",
        "join=/sys/fs/cgroup/pids/sb/machinery/cgroup.procs",
    ]
    assert daemon_arguments(SandboxCgroup(CgroupLayout(1, parents), "sb")) == ["200,201/202,203"]


def test_without_memory_and_pids_controllers_the_sandbox_stays_flat():
    layout = CgroupLayout(2, {"cpu": Path("/sys/fs/cgroup/evsys")})
    cg = SandboxCgroup(layout, "sb")
    assert cg.nested == () and daemon_arguments(cg) == []
    assert cg.dir_paths() == ["/sys/fs/cgroup/evsys/sb"]
    assert _items(layout, memory_mb=None) == ["join=/sys/fs/cgroup/evsys/sb/cgroup.procs"]


class _Counters:
    """A nested sandbox cgroup whose counters read as given."""

    nested = ("memory", "pids")
    dirs = {"memory": Path("/cg/memory/sb"), "pids": Path("/cg/pids/sb")}

    def __init__(self, now: dict[str, int]) -> None:
        self.now = now

    def read_counters(self) -> dict[str, int]:
        return self.now


def _evidence(now: dict[str, int]) -> list[str]:
    return exhaustion_evidence(_Counters(now), {}, None)  # type: ignore[arg-type]


def test_the_agents_own_cgroup_decides_not_the_verifiers():
    [agent] = _evidence({"agent.memory": 1, "agent.memory_limit": 1, "memory": 1, "memory_limit": 1})
    assert agent.startswith("memory: 1 OOM kill") and agent.endswith("/cg/memory/sb/agent)")
    [pids] = _evidence({"agent.pids": 3, "verifier.pids": 2})
    assert pids.startswith("pids: 3 fork(s)") and "/cg/pids/sb/agent" in pids
    # a verification run that outgrows its own limit is the task's
    assert _evidence({"verifier.memory": 1, "verifier.memory_limit": 1, "verifier.pids": 5}) == []
    # the sandbox's limit reached with the agent at its own (its files fill it): the agent's
    [outer] = _evidence({"memory": 1, "memory_limit": 1, "agent.memory_limit": 1})
    assert outer.endswith("/cg/memory/sb)")
    assert _evidence({"memory": 1, "memory_limit": 1}) == []  # the agent below its limit: not the agent's
