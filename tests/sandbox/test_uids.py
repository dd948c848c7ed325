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
    # a host user with a uid inside the next block: that block is skipped too (read afresh: a new reading)
    monkeypatch.setattr(uids.pwd, "getpwall", lambda: [_User(lowest + uids.UID_BLOCK + 5)])
    monkeypatch.setattr(uids, "_host_users", uids._HostUsers())
    try:
        taken = uids.allocate(tmp_path)
        assert taken.uid == lowest + 2 * uids.UID_BLOCK
        taken.release()
    finally:
        os.close(held)


def test_a_block_another_process_gave_back_is_taken_again(tmp_path, monkeypatch):
    probe = uids.allocate(tmp_path)
    lowest = probe.uid
    probe.release()
    other = os.open(tmp_path / "uids" / str(lowest), os.O_RDWR)
    fcntl.flock(other, fcntl.LOCK_EX)  # another process holds the lowest block...
    skipped = uids.allocate(tmp_path)
    assert skipped.uid == lowest + uids.UID_BLOCK  # positive control: it was busy
    os.close(other)  # ...and gives it back
    monkeypatch.setattr(uids, "BUSY_RECHECK", 0.0)  # (it is tried ahead of higher ones again after this)
    again = uids.allocate(tmp_path)
    assert again.uid == lowest
    again.release()
    skipped.release()


def test_a_lock_file_removed_while_its_block_was_free_is_not_trusted(tmp_path):
    first = uids.allocate(tmp_path)  # its lock file stays open here after the release
    first.release()
    (tmp_path / "uids" / str(first.uid)).unlink()
    other = os.open(tmp_path / "uids" / str(first.uid), os.O_RDWR | os.O_CREAT)
    fcntl.flock(other, fcntl.LOCK_EX)  # another process holds the block through the new file
    try:
        taken = uids.allocate(tmp_path)
        assert taken.uid != first.uid
        taken.release()
    finally:
        os.close(other)


def test_a_forked_child_and_its_parent_never_hold_the_same_block(tmp_path):
    freed = uids.allocate(tmp_path)  # released before the fork: its lock file stays open, unlocked
    freed.release()
    to_parent, child_end = os.pipe()
    child_start, to_child = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child takes a block and holds it until the parent has taken one too
        try:
            taken = uids.allocate(tmp_path)
            os.write(child_end, str(taken.uid).encode())
            os.read(child_start, 1)
        finally:
            os._exit(0)
    child_uid = int(os.read(to_parent, 64))
    try:
        mine = uids.allocate(tmp_path)
        assert child_uid == freed.uid  # the lowest free block went to the child...
        assert mine.uid != child_uid  # ...and the parent cannot take it while the child holds it
        mine.release()
    finally:
        os.write(to_child, b"x")
        os.waitpid(pid, 0)
        for fd in (to_parent, child_end, child_start, to_child):
            os.close(fd)


def test_an_unwritable_scratch_dir_is_a_clear_error(tmp_path):
    (tmp_path / "uids").write_text("not a directory")
    with pytest.raises(SandboxError, match=r"cannot take an agent uid in .*uids"):
        uids.allocate(tmp_path)
