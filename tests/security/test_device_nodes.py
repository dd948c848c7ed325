"""Red team: root in a sandbox cannot change the host's device nodes that bwrap's `--dev` binds into its /dev.

Root inside is host uid 0 and owns those inodes: on a writable mount, `chmod 000 /dev/null` inside would break
the host's /dev/null and every sandbox's. The setup step covers them with read-only binds (native/setup.c);
the devices still open, read and write, for root and the agent, in a fresh sandbox and after a reset.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest

from evsys.records import Bind

pytestmark = pytest.mark.security
NODES = ("null", "zero", "full", "random", "urandom", "tty")
# each change writes back what is there (same mode, owner and times): harmless if it ever got through
ATTACK = "; ".join(
    f'chmod "$(stat -c %a /dev/{n})" /dev/{n}; chown "$(stat -c %u:%g /dev/{n})" /dev/{n};'
    f" touch -h -r /dev/{n} /dev/{n}"
    for n in NODES
)
USE = (
    "echo hi > /dev/null && echo null-ok; head -c 16 /dev/urandom | wc -c; head -c 16 /dev/random | wc -c;"
    " head -c 4 /dev/zero | od -An -tx1; echo x > /dev/full || echo full-ok"
)


def host_ctimes() -> dict[str, int]:
    """The host's change times of the nodes (ns): a chmod, chown or utimes of any of them moves its own."""
    return {n: os.stat(f"/dev/{n}").st_ctime_ns for n in NODES}


@pytest.fixture
def host_null_link():
    """A second name of the host's /dev/null inode (a hard link in the host's /dev): a path the setup step
    does not cover, for the positive control."""
    link = Path(f"/dev/.evsys-null-{secrets.token_hex(4)}")
    os.link("/dev/null", link)
    yield link
    link.unlink()


@pytest.mark.parametrize("after_reset", [False, True], ids=["fresh", "reset"])
async def test_root_cannot_chmod_chown_or_touch_the_hosts_devices(make_sandbox, host_null_link, after_reset):
    sb = await make_sandbox(binds=[Bind(src=host_null_link, dst="/mnt/host-null", read_only=False)])
    if after_reset:
        await sb.reset()
    # positive control: the same chmod, as root in this sandbox, through a writable bind of the same inode
    before = os.stat("/dev/null").st_ctime_ns
    control = await sb.exec("chmod 666 /mnt/host-null", user="root")
    assert control.exit_code == 0, control.stderr
    assert os.stat("/dev/null").st_ctime_ns != before, "the control's chmod did not reach the host inode"
    before_all = host_ctimes()
    r = await sb.exec(ATTACK, user="root")
    assert host_ctimes() == before_all
    assert r.stderr.count("Read-only file system") == 3 * len(NODES), r.stderr  # every change was tried


@pytest.mark.parametrize("after_reset", [False, True], ids=["fresh", "reset"])
@pytest.mark.parametrize("user", ["root", "agent"])
async def test_the_devices_still_work(sandbox, user, after_reset):
    if after_reset:
        await sandbox.reset()
    r = await sandbox.exec(USE, user=user)
    assert r.stdout.split() == ["null-ok", "16", "16", "00", "00", "00", "00", "full-ok"], r.stdout + r.stderr
    assert "No space left on device" in r.stderr  # /dev/full was opened for writing
