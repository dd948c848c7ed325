"""The audit hook of the grading pytest (loaded by runner_child.py before any repository code): it alone holds
the run's key, signs the report lines, and refuses what forging needs.

Standard library only, Python 3.6+ syntax. The hook runs inside the tests' own process, so it never runs code
the tests can reach or replace: everything it uses — builtins, `os.write`, `sys._getframe`, the hash objects
keyed with the run's key, the trusted paths — is bound into its closure when it is installed (no global name
is looked up while it runs), it reads only exact `str` / `int` / `bytes` values of an event (no `repr`, no
`__fspath__`, no `__eq__` of the tests' objects), and nothing outside the interpreter's list of audit hooks
refers to it (Python has no way to list or remove them).

Report lines: `MAC SEQ KIND TEXT\\n`, MAC the HMAC-SHA256 (keyed with the run's key) of `SEQ KIND TEXT`, SEQ
counting from 0, TEXT without newlines: `outcome` (the reporter's JSON), `always_equal` (JSON), `refused`
(the event and where it came from) and `finish` (`EXIT COUNT`, the last line, accepted only from the
runner's own frame after `pytest.main` returned).
"""

import hashlib
import os
import sys
import sysconfig
from collections.abc import Iterable, Mapping
from types import CodeType, FrameType
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
FRAME_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
ALWAYS_REFUSED: "tuple[str, ...]" = (
    "gc.get_objects",
    "gc.get_referrers",
    "gc.get_referents",
    "sys._current_frames",
)
ALWAYS_REFUSED += ("sys.settrace", "sys.setprofile", "sys.monitoring.register_callback")
ALWAYS_REFUSED += ("sys.addaudithook",)
PROC_PRIVATE = frozenset({"mem", "pagemap", "map_files", "fd"})


class Trust:
    """Which code is the repository's (not trusted) and which is the standard library's, an installed
    package's, this runner's or a test file's (trusted), by file name."""

    def __init__(self, root: str, test_files: "Iterable[str]") -> None:
        self.root = str(root).rstrip("/") + "/"
        self.tests = frozenset(str(t) for t in test_files)
        paths = sysconfig.get_paths()
        prefixes = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")} | {HERE}
        self.prefixes = (*(os.path.realpath(p) + "/" for p in prefixes if p), "<frozen ")
        self.ctypes_dir = os.path.join(os.path.realpath(paths["stdlib"]), "ctypes") + "/"

    def trusted(self, filename: object) -> bool:
        """Whether code from `filename` is trusted."""
        if type(filename) is not str:
            return False
        if filename.startswith(self.root):
            rel = filename[len(self.root) :]
            return rel in self.tests or rel == "conftest.py" or rel.endswith("/conftest.py")
        return filename.startswith(self.prefixes)


def _pads(key: bytes) -> "tuple[Any, Any]":
    """The HMAC-SHA256 inner and outer hash objects of `key` (C objects: `.copy()` per message)."""
    block = key.ljust(64, b"\0")
    inner = hashlib.sha256(bytes(b ^ 0x36 for b in block))
    outer = hashlib.sha256(bytes(b ^ 0x5C for b in block))
    return inner, outer


def _path_internals() -> "tuple[frozenset[type], tuple[Any, ...]]":
    """`pathlib`'s concrete path classes and the slot descriptors holding a path's text or parts."""
    import pathlib

    types = (pathlib.PosixPath, pathlib.PurePosixPath, pathlib.WindowsPath, pathlib.PureWindowsPath)
    slots = [pathlib.PurePath.__dict__.get(n) for n in ("_str", "_parts", "_raw_paths")]
    member = type(pathlib.PurePath.__dict__["_drv"])  # a slot's descriptor: reading it runs no Python
    return frozenset(types), tuple(s for s in slots if type(s) is member)


def install_guard(
    key: bytes,
    fd: int,
    trust: Trust,
    senders: "tuple[CodeType, ...]",
    finish_codes: "tuple[CodeType, CodeType]",
    watched: "Mapping[str, Mapping[str, Any]]",
) -> None:
    """Install the audit hook: it signs `evsys.report` events raised by `senders` (code objects) and the
    `evsys.finish` event raised by `finish_codes[0]` called from `finish_codes[1]` (itself called by the
    module), writing them to `fd`; it refuses (and reports) what forging needs. Before each test's call
    (an `armed` report) and with its call's report it compares `watched` ({name: a module's or class's
    namespace}) with what they held at the first `ready` report (pytest set up, before any conftest or test
    file loads): an entry replaced, removed or added (other than a flag) is reported as `tampered`."""
    _type, _str, _int, _bytes, _list, _len, _OSError = type, str, int, bytes, list, len, OSError
    path_types, path_slots = _path_internals()
    slot_errors = (AttributeError, TypeError)
    _getframe, _write, _stat, _getcwd = sys._getframe, os.write, os.stat, os.getcwd
    denied, errors = PermissionError, {"import": ImportError, "sys._getframe": ValueError}
    errors["object.__getattr__"] = AttributeError
    root, tests, prefixes = trust.root, trust.tests, trust.prefixes
    refused, frame_attrs, private = ALWAYS_REFUSED, FRAME_ATTRS, PROC_PRIVATE
    machinery = ("<frozen importlib", trust.ctypes_dir)
    codes, (finish, child_code) = tuple(senders), finish_codes
    inner, outer = _pads(key)
    proc_dev = _stat("/proc").st_dev if os.path.isdir("/proc") else -1
    newline, call_phase = "\n", '"when": "call"'
    state = [0, False, False, False]  # next line's number, inside the hook, last line written, tampered
    spaces = list(watched.items())
    snapshot: list[tuple[str, Mapping[str, Any], list[tuple[str, Any]]]] = []

    flags = frozenset({bool, int, str, type(None)})

    def tampered() -> "str | None":
        # entries compared in order, by identity (no `==` of the tests' objects runs); an entry added after
        # the snapshot may only be a flag (pytest notes e.g. a warning shown on its classes)
        for name, space, before in snapshot:
            count = 0
            for key, value in space.items():
                if count < _len(before) and (key is not before[count][0] or value is not before[count][1]):
                    key0 = before[count][0]
                    return name + "." + (key0 if _type(key0) is _str else "?")
                if count >= _len(before) and _type(value) not in flags:
                    return name + "." + (key if _type(key) is _str else "?")
                count += 1
            if count < _len(before):
                return name
        return None

    def check() -> None:
        what = None if snapshot else "the runner's snapshot, never taken:"
        what = None if state[3] else what or tampered()
        if what is not None:
            state[3] = True
            write("tampered", what + " was replaced after the repository loaded")

    def trusted(name: Any) -> bool:
        if _type(name) is not _str:
            return False
        if name.startswith(root):
            rel = name[_len(root) :]
            return rel in tests or rel == "conftest.py" or rel.endswith("/conftest.py")
        return name.startswith(prefixes)

    def where(frame: FrameType) -> str:
        name = frame.f_code.co_filename
        return (name if _type(name) is _str else "?") + f":{frame.f_lineno}"

    def write(kind: str, text: str) -> None:
        if not state[2]:
            line = f"{state[0]} {kind} {text.replace(newline, ' ')}".encode()
            state[0] += 1
            mac_in, mac_out = inner.copy(), outer.copy()
            mac_in.update(line)
            mac_out.update(mac_in.digest())
            _write(fd, mac_out.hexdigest().encode() + b" " + line + b"\n")

    def refuse(event: str, detail: str) -> None:
        write("refused", event + " " + detail)
        raise errors.get(event, denied)(f"evsys: {event} refused during grading")

    def on_report(event: str, args: "tuple[Any, ...]", frame: FrameType) -> None:
        sender = False
        for code in codes:
            sender = sender or frame.f_code is code
        if not sender or _len(args) != 2 or _type(args[0]) is not _str or _type(args[1]) is not _str:
            refuse(event, "raised by " + where(frame))
        if args[0] == "ready" and not snapshot:  # pytest configured, before any conftest or test loads
            snapshot.extend([(name, space, list(space.items())) for name, space in spaces])
        if args[0] == "armed" or (args[0] == "outcome" and call_phase in args[1]):
            check()
        write(args[0], args[1])

    def on_finish(event: str, args: "tuple[Any, ...]", frame: FrameType) -> None:
        up: Any = frame.f_back  # child(), called by the module itself: pytest has returned
        chain = up is not None and up.f_code is child_code and up.f_back is not None
        ok = frame.f_code is finish and chain and up.f_back.f_back is None and _type(args[0]) is _int
        if not ok:
            refuse(event, "raised by " + where(frame))
        write("finish", f"{args[0]} {state[0]}")
        state[2] = True

    def frame_walk(event: str, args: "tuple[Any, ...]", frame: FrameType) -> None:
        asked = event != "object.__getattr__" or (_type(args[1]) is _str and args[1] in frame_attrs)
        if asked and not trusted(frame.f_code.co_filename):
            refuse(event, "from " + where(frame))

    def on_code(event: str, args: "tuple[Any, ...]", frame: FrameType) -> None:
        # code the repository makes must not pass for the standard library's or a test file's
        if _len(args) > 1 and trusted(args[1]) and not trusted(frame.f_code.co_filename):
            refuse(event, args[1] + " from " + where(frame))

    def on_import(event: str, args: "tuple[Any, ...]", frame: FrameType) -> None:
        if _type(args[0]) is _str and args[0] in ("ctypes", "_ctypes"):
            on_ctypes(event, args, frame, args[0] + " ")

    def on_ctypes(event: str, args: "tuple[Any, ...]", frame: Any, what: str = "") -> None:
        # ctypes for the repository's own code: never (an installed package may use it, e.g. numpy)
        while frame is not None and _type(frame.f_code.co_filename) is _str:
            if not frame.f_code.co_filename.startswith(machinery):
                break
            frame = frame.f_back  # past importlib's and ctypes' own frames, to the code that asked
        if frame is None or not trusted(frame.f_code.co_filename):
            refuse(event, what + "from " + ("?" if frame is None else where(frame)))

    def on_path(event: str, args: "tuple[Any, ...]", frame: FrameType) -> None:
        path: Any = args[0] if _len(args) else None
        if _type(path) is _int and path == fd:
            refuse(event, "of the report's descriptor")
        if _type(path) is _bytes:
            path = path.decode("utf-8", "replace")
        if _type(path) is not _str and _type(path) is not _int:
            path = path_text(path)
        if path is None and not trusted_stack(frame):
            refuse(event, "of a path object from " + where(frame))
        if _type(path) is _str and private_path(path):
            refuse(event, path)

    def path_text(path: object) -> "str | None":
        """The text of a `pathlib` path, read from its slots (no method of it runs); None otherwise."""
        if _type(path) not in path_types:
            return None
        for slot in path_slots:
            try:
                value = slot.__get__(path)
            except slot_errors:
                continue
            if _type(value) is _str:
                return value
            if _type(value) is _list and all_str(value):
                return "/".join(value)
        return None

    def all_str(values: "list[Any]") -> bool:
        for value in values:
            if _type(value) is not _str:
                return False
        return True

    def trusted_stack(frame: Any) -> bool:
        while frame is not None:
            if not trusted(frame.f_code.co_filename):
                return False
            frame = frame.f_back
        return True

    def private_path(path: str) -> bool:
        for part in path.split("/"):
            if part in private:  # a process's memory or descriptors, by any route
                return True
        if path.startswith("/proc/") or path == "/proc":
            return False
        try:
            return _stat(path).st_dev == proc_dev  # /proc reached through a link or a relative path
        except _OSError:
            return False

    handlers = {"evsys.report": on_report, "evsys.finish": on_finish, "sys._getframe": frame_walk}
    handlers.update({"object.__getattr__": frame_walk, "import": on_import, "open": on_path})
    handlers.update(
        {"os.listdir": on_path, "os.scandir": on_path, "compile": on_code, "code.__new__": on_code}
    )

    def guard(event: str, args: "tuple[Any, ...]", depth: int) -> None:
        if state[1]:
            return
        handler = handlers.get(event) or (on_ctypes if event.startswith("ctypes.") else None)
        if handler is None and not event.startswith(refused):
            return
        state[1] = True
        try:
            if handler is None:
                refuse(event, "from " + where(_getframe(depth)))
            else:
                handler(event, args, _getframe(depth))  # the code that raised the event
        finally:
            state[1] = False

    def hook(event: str, args: "tuple[Any, ...]") -> None:
        guard(event, args, 2)

    if hasattr(sys, "addaudithook"):
        sys.addaudithook(hook)
    else:  # Python < 3.8: no audit hooks; the report is still signed, by this closure
        sys.audit = lambda event, *args: guard(event, args, 2)
