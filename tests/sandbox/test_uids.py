"""Per-sandbox agent uids: distinct while held, lowest free first, never a host user's, never one another
process holds."""

from __future__ import annotations

import fcntl
import os

import pytest

from evsys.sandbox.base import SandboxError
from evsys.sandbox.local import uids


def test_uids_are_distinct_while_held_and_the_lowest_free_one_comes_back(tmp_path):
    first, second = uids.allocate(tmp_path), uids.allocate(tmp_path)
    assert first.uid < second.uid and first.uid >= uids.AGENT_UID_FIRST
    assert second.uid - first.uid >= uids.UID_BLOCK  # each holds a block: its agent's and extra users' uids
    first.release()
    first.release()  # idempotent
    again = uids.allocate(tmp_path)
    assert again.uid == first.uid
    again.release()
    second.release()


class _User:
    def __init__(self, uid: int) -> None:
        self.pw_uid = uid


def test_a_uid_another_process_holds_or_a_host_user_has_is_skipped(tmp_path, monkeypatch):
    probe = uids.allocate(tmp_path)  # the lowest uid free here
    lowest = probe.uid
    probe.release()
    held = os.open(tmp_path / "uids" / str(lowest), os.O_RDWR)
    fcntl.flock(held, fcntl.LOCK_EX)  # another evsys process (its own open file description)
    # a host user with a uid inside the next block: that block is skipped too
    monkeypatch.setattr(uids.pwd, "getpwall", lambda: [_User(lowest + uids.UID_BLOCK + 5)])
    try:
        taken = uids.allocate(tmp_path)
        assert taken.uid == lowest + 2 * uids.UID_BLOCK
        taken.release()
    finally:
        os.close(held)


def test_an_unwritable_scratch_dir_is_a_clear_error(tmp_path):
    (tmp_path / "uids").write_text("not a directory")
    with pytest.raises(SandboxError, match=r"cannot take an agent uid in .*uids"):
        uids.allocate(tmp_path)
