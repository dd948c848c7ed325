"""The red team's shared helpers: the no-op switch's replacements for `LocalSandbox` commands (see
conftest.py), unique sandbox specs, a host process search, this host's address and a connect probe.

They live here, not in conftest.py, because every conftest.py of the suite is imported as the module
`conftest`: `from conftest import ...` gets whichever conftest.py pytest loaded last, which depends on the
test files a run collects.
"""

from __future__ import annotations

import itertools
import os
import subprocess

from evsys.records import ExecResult, SandboxSpec
from evsys.sandbox import LocalSandbox

NOOP_ENV = "EVSYS_SECURITY_NOOP"
CONNECT_PY = """
import socket, sys
s = socket.socket()
s.settimeout(2)
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
    print("CONNECTED")
except OSError as e:
    print("ERR", e.errno)
"""
CONNECT = f"python3 -c '{CONNECT_PY}' {{host}} {{port}}"  # prints CONNECTED or ERR <errno>
_names = itertools.count()


def noop_mode() -> bool:
    """True when the suite runs against the no-op sandbox (EVSYS_SECURITY_NOOP=1)."""
    return os.environ.get(NOOP_ENV) == "1"


async def noop_exec_request(self, *args, **kwargs) -> ExecResult:
    """A command that runs nothing: exit 0, no output."""
    self._running_client()  # still refuses a stopped sandbox, like the real one
    return ExecResult(exit_code=0)


_real_spawn = LocalSandbox.spawn


async def noop_spawn(self, argv, **kwargs):
    """A spawned process that runs nothing: `true`, whatever was asked (stdin dropped)."""
    return await _real_spawn(self, ["true"], **{**kwargs, "stdin": b""})


def redteam_spec(**kw) -> SandboxSpec:
    """A spec with a unique name (the red team's sandboxes)."""
    kw.setdefault("name", f"redteam-{os.getpid()}-{next(_names)}")
    return SandboxSpec(**kw)


def host_pids_with(marker: str) -> list[int]:
    """Host pids whose command line contains `marker` (not zombies)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read()
            with open(f"/proc/{entry}/status") as f:
                zombie = "\nState:\tZ" in f.read()
        except OSError:
            continue
        if marker.encode() in argv and not zombie:
            found.append(int(entry))
    return found


def host_address() -> str | None:
    """A non-loopback IPv4 address of this host, if it has one."""
    argv = ["ip", "-4", "-o", "addr", "show", "scope", "global"]
    out = subprocess.run(argv, capture_output=True, text=True, check=False)
    fields = out.stdout.split()
    return fields[fields.index("inet") + 1].split("/")[0] if "inet" in fields else None
