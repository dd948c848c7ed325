"""The local sandbox inside a container, as it runs in a KubeRay pod: evsys in a container of the private
dockerd (tests/dockerd_fixtures.py) with its own cgroup namespace and only some cgroup controllers, runs the
sandbox conformance suite, and `evsys doctor` there says truthfully which limits hold.

The container is not privileged: it gets the capabilities the sandbox needs beyond docker's defaults
(SYS_ADMIN, SYS_PTRACE, WAKE_ALARM, NET_ADMIN for networking), /dev/net/tun for slirp4netns, no seccomp or
AppArmor profile and unmasked /proc paths (bubblewrap mounts a new /proc). Its root is an empty image with
the host's /usr and /etc, the evsys sources and the virtualenv bind-mounted read-only (no registry is
reachable here), a tmpfs for the sandbox scratch dir, and a 1 GiB memory limit (the pod's). Without one of
those capabilities a start fails at once, naming it.

Two layouts of what the orchestrator is given, both set up inside the container before evsys starts:
- `v2`: cgroup2 mounted at /sys/fs/cgroup as the container's cgroup namespace shows it (its own cgroup as the
  root, other processes in it). On this host every controller evsys uses is bound to cgroup v1, so none is
  delegated: memory and cpu cannot be limited (said plainly), process counts fall back to RLIMIT_NPROC.
- `v1-memory-only`: a hybrid layout with only the v1 memory hierarchy (the container's own memory cgroup) and
  an empty cgroup2: memory limited by its cgroup, pids by RLIMIT_NPROC, cpu not at all.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

import evsys

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/dev/net/tun").exists(), reason="no /dev/net/tun to give the container"),
]
IMAGE = "evsys-test/host-root:1"
EXTRA_CAPABILITIES = ("SYS_ADMIN", "SYS_PTRACE", "WAKE_ALARM", "NET_ADMIN")  # beyond docker's defaults
SRC = Path(evsys.__file__).resolve().parents[1]
CGROUP_SETUP = {
    "v2": "umount -l /sys/fs/cgroup && mount -t cgroup2 none /sys/fs/cgroup",
    "v1-memory-only": (
        "umount -l /sys/fs/cgroup && mount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup && "
        "mkdir /sys/fs/cgroup/memory /sys/fs/cgroup/unified && "
        "mount -t cgroup -o memory cgroup /sys/fs/cgroup/memory && "
        "mount -t cgroup2 none /sys/fs/cgroup/unified"
    ),
}
# Inside the container, after the cgroup setup: the suite, `evsys doctor`, and a probe of the limits.
SCRIPT = """
cd /tmp
python -m pytest -q -p no:cacheprovider -W ignore -p evsys.sandbox.conformance.plugin \
  --pyargs evsys.sandbox.conformance --sandbox-backend local > /tmp/suite.txt 2>&1
echo "SUITE-RC $?"; tail -3 /tmp/suite.txt
evsys doctor > /tmp/doctor.txt 2>&1; echo "DOCTOR-RC $?"
python - <<'PY'
import asyncio, dataclasses, json
from evsys.records import SandboxSpec
from evsys.sandbox import LocalSandbox
from evsys.sandbox.local.doctor import run_checks

print("DOCTOR", json.dumps([dataclasses.asdict(c) for c in run_checks(smoke=False)]))

async def agent_processes(pids_max: int) -> int:
    async with LocalSandbox(SandboxSpec(name=f"nproc-{pids_max}", pids_max=pids_max)) as sb:
        await sb.exec("for i in $(seq 80); do sleep 30 & done 2>/dev/null; true", timeout=30)
        return int((await sb.exec("pgrep -c -u agent || true", user="root")).stdout.split()[0])

async def memory_hits() -> list:
    async with LocalSandbox(SandboxSpec(name="memory", memory_mb=64)) as sb:
        return (await sb.exec("head -c 200m /dev/zero | tail", timeout=60)).limits_hit

async def main():
    print("NPROC", await agent_processes(1024), await agent_processes(24))
    if "memory" in str(open("/proc/self/cgroup").read()):  # the v1 memory hierarchy is mounted
        print("MEMORY", json.dumps(await memory_hits()))

asyncio.run(main())
PY
find /sys/fs/cgroup -mindepth 1 -depth -type d -name 'evsys-*' -exec rmdir {} + 2>/dev/null
true
"""


@pytest.fixture(scope="module")
def host_root_image(dockerd: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """An image holding only an empty root (directories and the usr-merge links); the host's /usr and /etc,
    the sources and the virtualenv are bind-mounted at run time."""
    tar = tmp_path_factory.mktemp("image") / "root.tar"
    with tarfile.open(tar, "w") as out:
        for name in ("usr", "etc", "proc", "sys", "dev", "run", "var", "var/tmp", "root", "opt", "tmp"):
            entry = tarfile.TarInfo(name)
            entry.type, entry.mode = tarfile.DIRTYPE, 0o1777 if name == "tmp" else 0o755
            out.addfile(entry)
        for name in ("bin", "lib", "lib64", "sbin"):
            entry = tarfile.TarInfo(name)
            entry.type, entry.linkname = tarfile.SYMTYPE, f"usr/{name}"
            out.addfile(entry)
    subprocess.run(["docker", "-H", dockerd, "import", str(tar), IMAGE], check=True, capture_output=True)
    return IMAGE


def run_in_container(
    dockerd: str, image: str, layout: str, script: str = SCRIPT, caps: tuple[str, ...] = EXTRA_CAPABILITIES
) -> str:
    """Run `script` in a fresh container with the cgroup `layout` and the capabilities `caps` added to
    docker's defaults; its output."""
    readonly = dict.fromkeys(("/usr", "/etc", str(SRC), sys.prefix, sys.base_prefix))
    binds = [arg for path in readonly for arg in ("-v", f"{path}:{path}:ro")]
    added = [arg for cap in caps for arg in ("--cap-add", cap)]
    argv = ["docker", "-H", dockerd, "run", "--rm", "--cgroupns=private", "-m", "1g", "--memory-swap", "1g"]
    argv += ["--device", "/dev/net/tun", *added, *binds, "--tmpfs", "/var/tmp:rw,exec,size=512m"]
    for option in ("seccomp=unconfined", "apparmor=unconfined", "systempaths=unconfined"):
        argv += ["--security-opt", option]
    argv += ["-e", f"PYTHONPATH={SRC}", "-e", f"PATH={sys.prefix}/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
    argv += [image, "bash", "-c", f"{CGROUP_SETUP[layout]} && {script}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _line(output: str, tag: str) -> str:
    """What follows `tag` on the output's line starting with it."""
    found = [line.split(" ", 1)[1] for line in output.splitlines() if line.startswith(f"{tag} ")]
    assert found, f"no {tag} line in:\n{output[-3000:]}"
    return found[0]


@pytest.mark.parametrize("layout", ["v2", "v1-memory-only"])
def test_the_conformance_suite_passes_in_a_container_with_partial_cgroup_delegation(
    dockerd, host_root_image, layout
):
    output = run_in_container(dockerd, host_root_image, layout)
    assert _line(output, "SUITE-RC") == "0", output[-3000:]
    assert " passed" in output and "failed" not in output
    assert _line(output, "DOCTOR-RC") == "0"  # degraded, never refused
    checks = {c["name"]: c for c in json.loads(_line(output, "DOCTOR"))}
    memory, pids, cpus = checks["memory_mb limit"], checks["pids_max limit"], checks["cpus limit"]
    assert "enforced by RLIMIT_NPROC of the sandbox's agent uid" in pids["detail"] and not pids["ok"]
    assert cpus["detail"].startswith("NOT LIMITED") and not cpus["ok"]
    unlimited, capped = map(int, _line(output, "NPROC").split())
    assert unlimited >= 80 and 0 < capped < 24  # the fallback holds the agent's process count
    if layout == "v2":
        assert "cgroups v2" in checks and checks["cgroups v2"]["detail"] == "controllers: none usable"
        assert memory["detail"].startswith("NOT LIMITED: not delegated to evsys's cgroup")
        assert not memory["ok"]
    else:
        assert "cgroups v1" in checks and memory["ok"] and memory["detail"] == "enforced by cgroup v1 memory"
        assert json.loads(_line(output, "MEMORY")) == ["memory"]


START_ONE = """python - <<'PY'
import asyncio
from evsys.records import SandboxSpec
from evsys.sandbox import LocalSandbox, SandboxError

async def main():
    try:
        async with LocalSandbox(SandboxSpec(name="one")) as sb:
            print("STARTED", (await sb.exec("echo ok")).stdout.strip())
    except SandboxError as exc:
        print("REFUSED", exc)

asyncio.run(main())
PY
"""


def test_a_container_without_a_needed_capability_fails_at_once_naming_the_fix(dockerd, host_root_image):
    granted = run_in_container(dockerd, host_root_image, "v2", START_ONE)
    assert _line(granted, "STARTED") == "ok"  # positive control: the same start works with the capabilities
    lacking = tuple(cap for cap in EXTRA_CAPABILITIES if cap != "WAKE_ALARM")
    refused = _line(run_in_container(dockerd, host_root_image, "v2", START_ONE, lacking), "REFUSED")
    assert "the local sandbox cannot run here: capabilities: lacking CAP_WAKE_ALARM" in refused
    assert "--cap-add WAKE_ALARM" in refused
