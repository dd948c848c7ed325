"""The grading pytest's own process, hardened before any repository code loads (started by runner.py).

Standard library only, Python 3.6+ syntax (the row's Python runs it, as `runner_child.py [pytest args]`, with
this file's directory first on `sys.path` and the repository last). Its setup arrives on stdin — the test
ids, the repository root, the test files, the report descriptor and a fresh key — and stdin is then
replaced by /dev/null: none of it is in argv, the environment or a file the tests can read. Before pytest
imports anything of the repository:

- the process is made non-dumpable (no other process of the test user reads its memory), and `ctypes` is
  dropped from `sys.modules`;
- an audit hook (PEP 578: it cannot be removed) refuses what forging a report needs and reports each
  refusal: `ctypes`, `gc` object walks, `sys._current_frames`, trace and profile hooks, opening this
  process's `/proc/<pid>/mem|fd|map_files`, and frame walks (`sys._getframe`, `tb_frame`, `gi_frame`...)
  asked for by code of the repository other than its test files, and code the repository compiles or
  makes under the name of a trusted file (the standard library's, an installed package's, a test file's);
- the hook alone holds the key: every report line (one per test phase, each refusal, and the final line)
  is written by the hook, signed, when evsys's reporter raises an `evsys.report` event — an event raised by
  any other code is refused. The final line is accepted only from `_finish`, called by `child` after pytest
  returned: a run that exits early (`os._exit`, a kill) has no final line and is void.

The reporter checks what it sees against what pytest's machinery was before the repository loaded: a call
phase whose report says passed while the test raised, pytest's reporting functions replaced, or a hook
implementation from the repository's own code voids the run. Comparisons in the test files' assertions go
through `_evsys_eq`: an operand of a type from the repository's code that equals a fresh sentinel object
fails its test (`ALWAYS_EQUAL`).
"""

import hashlib
import hmac
import json
import os
import sys
import sysconfig

HERE = os.path.dirname(os.path.abspath(__file__))
FRAME_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
ALWAYS_REFUSED = ("ctypes.", "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames")
ALWAYS_REFUSED += ("sys.settrace", "sys.setprofile", "sys.monitoring.register_callback")
PROC_PRIVATE = frozenset({"mem", "fd", "map_files", "pagemap"})
CHECKED = ("call_and_report", "runtestprotocol", "call_runtest_hook")
HOOKS = ("pytest_runtest_call", "pytest_pyfunc_call", "pytest_runtest_makereport", "pytest_runtest_logreport")


class Trust:
    """Which code is the repository's (not trusted) and which is the standard library's, an installed
    package's, this runner's or a test file's (trusted), by file name."""

    def __init__(self, root, test_files):
        self.root = root.rstrip("/") + "/"
        self.tests = set(test_files)
        paths = sysconfig.get_paths()
        prefixes = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")} | {HERE}
        self.prefixes = tuple(os.path.realpath(p) + "/" for p in prefixes if p)

    def trusted(self, filename):
        """Whether code from `filename` is trusted."""
        if type(filename) is not str:
            return False
        if filename.startswith(self.root):
            rel = filename[len(self.root) :]
            return rel in self.tests or os.path.basename(rel) == "conftest.py"
        return filename.startswith(self.prefixes) or filename.startswith("<frozen ")


def _proc_self(path):
    """Whether `path` names this process's private /proc files (memory, descriptors)."""
    if type(path) is bytes:
        path = path.decode("utf-8", "replace")
    if type(path) is not str or ("/proc/" not in os.path.abspath(path) and not path.startswith("/proc")):
        return False
    parts = os.path.abspath(path).split("/")
    mine = {"self", "thread-self", str(os.getpid())}
    return len(parts) > 3 and parts[2] in mine and bool(PROC_PRIVATE & set(parts[3:]))


def install_guard(key, fd, trust, senders):
    """The audit hook: signs and writes report lines for `senders` (code objects), refuses what forging
    needs. The key and the descriptor live only in its closure; it never calls the tests' code (no repr of
    what an event carries, no `__fspath__`)."""
    state = {"seq": 0, "busy": False, "sealed": False}
    finish, child_code = senders.pop("finish")
    sender_codes = set(senders.values())

    def write(kind, body):
        if not state["sealed"]:
            text = json.dumps(dict(body, kind=kind, seq=state["seq"]), sort_keys=True)
            state["seq"] += 1
            mac = hmac.new(key, text.encode(), hashlib.sha256).hexdigest()
            os.write(fd, (json.dumps({"body": text, "mac": mac}) + "\n").encode())

    def refuse(event, detail, exc):
        write("refused", {"event": event, "detail": detail})
        raise exc(f"evsys: {event} refused during grading")

    def on_report(event, args, frame):
        if frame.f_code not in sender_codes or type(args[0]) is not str or type(args[1]) is not dict:
            refuse(event, f"raised by {frame.f_code.co_filename}", PermissionError)
        write(args[0], json.loads(json.dumps(args[1])))

    def on_finish(event, args, frame):
        up = frame.f_back  # child(), called by the module itself: pytest has returned
        chain = up is not None and up.f_code is child_code and up.f_back is not None
        if (
            frame.f_code is not finish
            or not chain
            or up.f_back.f_back is not None
            or type(args[0]) is not int
        ):
            refuse(event, f"raised by {frame.f_code.co_filename}", PermissionError)
        write("finish", {"exit": args[0], "count": state["seq"]})
        state["sealed"] = True

    def frame_walk(event, args, frame):
        if (event != "object.__getattr__" or args[1] in FRAME_ATTRS) and not trust.trusted(
            frame.f_code.co_filename
        ):
            where = f"{event} from {frame.f_code.co_filename}:{frame.f_lineno}"
            refuse(event, where, AttributeError if event == "object.__getattr__" else ValueError)

    def on_code(event, args, frame):
        # code the repository makes must not pass for the standard library's or a test file's
        if trust.trusted(args[1]) and not trust.trusted(frame.f_code.co_filename):
            refuse(event, f"{event} of {args[1]} from {frame.f_code.co_filename}", PermissionError)

    def on_import(event, args, frame):
        if args[0] in ("ctypes", "_ctypes"):
            refuse(event, "import " + args[0], ImportError)

    def on_open(event, args, frame):
        if args[0] == fd if type(args[0]) is int else _proc_self(args[0]):
            refuse(
                event,
                "open " + str(args[0] if type(args[0]) in (int, str) else "of a /proc path"),
                PermissionError,
            )

    handlers = {"evsys.report": on_report, "evsys.finish": on_finish, "sys._getframe": frame_walk}
    handlers.update({"object.__getattr__": frame_walk, "import": on_import, "open": on_open})
    handlers.update(
        {"os.listdir": on_open, "os.scandir": on_open, "compile": on_code, "code.__new__": on_code}
    )

    def guard(event, args, depth):
        handler = handlers.get(event)
        if state["busy"] or (handler is None and not event.startswith(ALWAYS_REFUSED)):
            return
        state["busy"] = True
        try:
            if handler is None:
                refuse(event, event, PermissionError)
            handler(event, args, sys._getframe(depth))  # the code that raised the event
        finally:
            state["busy"] = False

    def hook(event, args):
        guard(event, args, 2)

    if hasattr(sys, "addaudithook"):
        sys.addaudithook(hook)
    else:  # Python < 3.8: no audit hooks; the report is still signed, by this closure
        sys.audit = lambda event, *args: guard(event, args, 2)


def drop_ctypes():
    """Make this process non-dumpable (its memory unreadable to other processes of the test user), then
    forget ctypes: the audit hook refuses it from now on."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    except (ImportError, OSError, AttributeError):
        pass
    for name in [n for n in sys.modules if n == "ctypes" or n.startswith(("ctypes.", "_ctypes"))]:
        del sys.modules[name]


def read_setup():
    """The setup the runner sent on stdin; stdin becomes /dev/null."""
    data = json.loads(sys.stdin.buffer.read().decode())
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    return data


def _status(report, untrusted_xfail):
    """A test phase's outcome as evsys names it (None for a setup or teardown that passed)."""
    wasxfail = hasattr(report, "wasxfail")
    if report.when != "call" and not report.skipped:
        return "ERROR" if report.failed else None
    if wasxfail and report.skipped:
        return "XFAIL_OUTSIDE_TESTS" if report.nodeid in untrusted_xfail else "XFAIL"
    if wasxfail and report.passed:
        return "XPASS"
    return {"passed": "PASSED", "failed": "FAILED", "skipped": "SKIPPED"}[report.outcome]


class Machinery:
    """What pytest's reporting was before the repository loaded, to compare with what it is now."""

    def __init__(self, trust):
        import _pytest.python
        import _pytest.reports
        import _pytest.runner

        self.trust = trust
        self.functions = {name: getattr(_pytest.runner, name, None) for name in CHECKED}
        self.functions["TestReport.from_item_and_call"] = _pytest.reports.TestReport.__dict__.get(
            "from_item_and_call"
        )
        self.functions["CallInfo.from_call"] = _pytest.runner.CallInfo.__dict__.get("from_call")
        self.functions["Function.runtest"] = _pytest.python.Function.__dict__.get("runtest")
        self.functions["pytest_pyfunc_call"] = getattr(_pytest.python, "pytest_pyfunc_call", None)
        self.modules = {"TestReport.": _pytest.reports.TestReport, "CallInfo.": _pytest.runner.CallInfo}

    def changed(self, config):
        """What was replaced since, or a hook implementation from the repository's code (None if none)."""
        import _pytest.python
        import _pytest.runner

        now = {name: getattr(_pytest.runner, name, None) for name in CHECKED}
        now["TestReport.from_item_and_call"] = self.modules["TestReport."].__dict__.get("from_item_and_call")
        now["CallInfo.from_call"] = self.modules["CallInfo."].__dict__.get("from_call")
        now["Function.runtest"] = _pytest.python.Function.__dict__.get("runtest")
        now["pytest_pyfunc_call"] = getattr(_pytest.python, "pytest_pyfunc_call", None)
        for name, before in self.functions.items():
            if now[name] is not before:
                return f"pytest's {name} was replaced"
        for hook in HOOKS:
            for impl in getattr(config.hook, hook).get_hookimpls():
                code = getattr(impl.function, "__code__", None)
                if code is None or not self.trust.trusted(code.co_filename):
                    return f"a {hook} implementation from {getattr(code, 'co_filename', '?')}"
        return None


def make_reporter(pytest, trust, machinery):
    """evsys's pytest plugin: each test phase's outcome, reported as it happens (never stored for later)."""

    class Reporter:
        """Per-phase outcomes, the call phase's own exception, and the assertion equality check."""

        def __init__(self):
            self.untrusted_xfail = set()
            self.raised = {}
            self.current = None
            self.config = None

        def pytest_configure(self, config):
            """Keep the config: its hooks are checked after each test."""
            self.config = config

        @pytest.hookimpl(hookwrapper=True, trylast=True)
        def pytest_runtest_call(self, item):
            """What the test's call really raised, before any report is made of it."""
            self.current = item.nodeid
            outcome = yield
            excinfo = outcome.excinfo
            self.raised[item.nodeid] = None if excinfo is None else excinfo[0].__name__

        def pytest_runtest_makereport(self, item, call):
            """Note xfails raised by a `pytest.xfail()` call outside the test files."""
            excinfo = call.excinfo
            if excinfo is not None and isinstance(excinfo.value, pytest.xfail.Exception):
                entries = list(excinfo.traceback)
                caller = str(entries[-2].path) if len(entries) >= 2 else ""
                if not trust.trusted(caller) or not caller.startswith(trust.root):
                    self.untrusted_xfail.add(item.nodeid)

        def pytest_runtest_logreport(self, report):
            """Report the phase; after a call, check pytest's machinery and the call's own outcome."""
            status = _status(report, self.untrusted_xfail)
            body = {"test": report.nodeid, "when": report.when, "status": status}
            if report.when == "call":
                body["raised"] = self.raised.pop(report.nodeid, "NO_CALL")
                body["tampered"] = machinery.changed(self.config)
            sys.audit("evsys.report", "outcome", body)

        def always_equal(self, left, right, equal):
            """`left == right` (or `!=`), failing the test when an operand of the repository's own type
            equals a fresh sentinel."""
            for operand in (left, right):
                module = sys.modules.get(getattr(type(operand), "__module__", ""), None)
                if trust.trusted(getattr(module, "__file__", None)) or not _accepts(operand):
                    continue
                kind = type(operand)
                evidence = f"{self.current}: {kind.__module__}.{kind.__qualname__} equals any object"
                sys.audit("evsys.report", "always_equal", {"test": self.current, "evidence": evidence})
                raise AssertionError("evsys: " + evidence)
            return left == right if equal else left != right

    return Reporter()


def _accepts(operand):
    """Whether `operand` equals (or is not unequal to) a fresh sentinel."""
    try:
        return bool(operand == object()) or not bool(operand != object())
    except Exception:
        return False


def hook_assertions(reporter, trust):
    """Every `==` / `!=` of a rewritten assertion goes through `reporter.always_equal`; pytest's cached
    rewritten test files are never read (the cache was written without the check)."""
    import ast

    import _pytest.assertion.rewrite as rewrite

    original = rewrite.rewrite_asserts

    def rewrite_asserts(mod, *args, **kwargs):
        original(mod, *args, **kwargs)
        for node in ast.walk(mod):
            if _is_assert_compare(node):
                node.value = _checked(ast, node.value)

    rewrite.rewrite_asserts = rewrite_asserts
    read_pyc = rewrite._read_pyc

    def _read_pyc(source, *args, **kwargs):
        under_tree = str(source).startswith(trust.root)
        return None if under_tree else read_pyc(source, *args, **kwargs)

    rewrite._read_pyc = _read_pyc
    rewrite._evsys_eq = reporter.always_equal


def _checked(ast, compare):
    """`@pytest_ar._evsys_eq(left, right, is_eq)` in place of `left == right` (or `!=`), at its position."""
    place = lambda node: ast.copy_location(node, compare)  # noqa: E731
    func = place(ast.Attribute(value=place(ast.Name(id="@pytest_ar", ctx=ast.Load())), attr="_evsys_eq"))
    func.ctx = ast.Load()
    flag = place(ast.Constant(isinstance(compare.ops[0], ast.Eq)))
    return place(ast.Call(func=func, args=[compare.left, compare.comparators[0], flag], keywords=[]))


def _is_assert_compare(node):
    """An assignment pytest's rewriting made of one `==` or `!=` comparison."""
    import ast

    if not isinstance(node, ast.Assign) or len(node.targets) != 1 or not isinstance(node.value, ast.Compare):
        return False
    target, ops = node.targets[0], node.value.ops
    named = isinstance(target, ast.Name) and target.id.startswith("@py_assert")
    return named and len(ops) == 1 and isinstance(ops[0], (ast.Eq, ast.NotEq))


def _finish(code):
    """The run's last report line (accepted by the audit hook only from here, called by `child`)."""
    sys.audit("evsys.finish", code)


def child():
    """Read the setup, harden the process, run pytest with evsys's reporter, then sign the run's end."""
    setup = read_setup()
    fd, root = setup["fd"], setup["root"]
    os.set_inheritable(fd, False)  # nothing the tests start inherits it
    drop_ctypes()
    sys.path[:] = [p for p in sys.path if p not in ("", ".", os.getcwd(), root)] + [root]
    import pytest

    trust = Trust(root, setup["test_files"])
    reporter = make_reporter(pytest, trust, Machinery(trust))
    kind = type(reporter)
    senders = {name: getattr(kind, name).__code__ for name in ("pytest_runtest_logreport", "always_equal")}
    senders["finish"] = (_finish.__code__, child.__code__)
    install_guard(bytes.fromhex(setup.pop("key")), fd, trust, senders)
    hook_assertions(reporter, trust)
    main = pytest.main
    code = int(main(sys.argv[1:] + setup["ids"], plugins=[reporter]))
    _finish(code)
    return code


if __name__ == "__main__":
    sys.exit(child())
