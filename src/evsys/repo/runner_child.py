"""The grading pytest's own process, hardened before any repository code loads (started by runner.py).

Standard library only, Python 3.6+ syntax (the row's Python runs it, as `runner_child.py [pytest args]`, with
this file's directory first on `sys.path` and the repository last). Its setup arrives on stdin — the test
ids, the repository root, the test files, the report descriptor and a fresh key — and stdin is then
replaced by /dev/null: none of it is in argv, the environment or a file the tests can read. Before pytest
imports anything of the repository:

- the process is made non-dumpable (no other process of the test user reads its memory), and `ctypes` is
  dropped from `sys.modules`;
- runner_guard.py's audit hook (PEP 578: it cannot be removed) goes in: it alone holds the key and signs
  every report line, refuses what forging needs (`ctypes` for the repository's code, `gc` object walks,
  `sys._current_frames`, trace hooks, this process's `/proc` memory and descriptors, frame walks asked for
  by the repository's code...) and reports each refusal; the last line is accepted only from `_finish`,
  called by `child` after pytest returned (a run that exits early has none and is void);
- evsys's reporter (a plugin) reports each fact as it happens, never storing one for later: `ready` once
  pytest has set itself up (the hook then snapshots pytest's, pluggy's, json's and this runner's
  namespaces, and compares them before each test's call and with each report), `armed` and `raised` around
  each test function (called through a witness: the parent requires its line, and a call reported passed
  whose function raised voids the run), each phase's outcome, xfails raised outside the test files;
- the test files' assertions compare through `Reporter.always_equal` (`_pytest.assertion.rewrite`'s
  `_evsys_eq`): an operand of a type from the repository's code that equals a fresh `object()` fails its
  test (`ALWAYS_EQUAL`).
"""

import json
import os
import sys
from collections.abc import Mapping
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
GUARD = os.path.join(HERE, os.path.basename(__file__).replace("runner_child.py", "runner_guard.py"))
HOOKS = ("pytest_runtest_call", "pytest_pyfunc_call", "pytest_runtest_makereport", "pytest_runtest_logreport")


def drop_ctypes() -> None:
    """Make this process non-dumpable (its memory unreadable to other processes of the test user), then
    forget ctypes: the audit hook refuses it to the repository's code from now on."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    except (ImportError, OSError, AttributeError):
        pass
    for name in [n for n in sys.modules if n == "ctypes" or n.startswith(("ctypes.", "_ctypes"))]:
        del sys.modules[name]


def read_setup() -> "dict[str, Any]":
    """The setup the runner sent on stdin; stdin becomes /dev/null."""
    data = json.loads(sys.stdin.buffer.read().decode())
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    return data


def _status(report: Any) -> "str | None":
    """A test phase's outcome as evsys names it (None for a setup or teardown that passed)."""
    wasxfail = hasattr(report, "wasxfail")
    if report.when != "call" and not report.skipped:
        return "ERROR" if report.failed else None
    if wasxfail and report.skipped:
        return "XFAIL"
    if wasxfail and report.passed:
        return "XPASS"
    return {"passed": "PASSED", "failed": "FAILED", "skipped": "SKIPPED"}[report.outcome]


# bound by `_bind` before pytest sets itself up; from then on this module's namespace is among those the
# audit hook compares, so none of them (nor a function below) can be swapped without voiding the run
_AUDIT: Any = None
_QUOTE: Any = None
_PYTEST: Any = None
_TRUST: Any = None
_PARTIAL: Any = None
_ISCOROUTINE: Any = None


def _bind(pytest: Any, trust: Any) -> None:
    """The module-level references the reporter uses (no closure: closures can be rewritten in place)."""
    global _QUOTE, _PYTEST, _TRUST, _PARTIAL, _ISCOROUTINE
    import functools
    import inspect
    import json.encoder

    _QUOTE, _PYTEST, _TRUST = json.encoder.encode_basestring_ascii, pytest, trust
    _PARTIAL, _ISCOROUTINE = functools.partial, inspect.iscoroutine
    pytest.hookimpl(tryfirst=True)(Reporter.pytest_runtest_call)


def send(kind: str, **fields: object) -> None:
    """One report line through the audit hook (the only sender it accepts), the fields as JSON made here."""
    text = ", ".join(_QUOTE(k) + ": " + ("null" if v is None else _QUOTE(str(v))) for k, v in fields.items())
    _AUDIT("evsys.report", kind, "{" + text + "}")


async def witnessed(coroutine: Any, test: str) -> Any:
    """`witness` for a coroutine test function: reported when it has run."""
    try:
        result = await coroutine
    except BaseException as exc:
        send("raised", test=test, raised=type(exc).__name__)
        raise
    send("raised", test=test, raised=None)
    return result


def witness(function: Any, test: str, *args: Any, **kwargs: Any) -> Any:
    """The test function, called: what it raised (or that it returned) is reported before pytest sees it."""
    try:
        result = function(*args, **kwargs)
    except BaseException as exc:
        send("raised", test=test, raised=type(exc).__name__)
        raise
    if _ISCOROUTINE(result):
        return witnessed(result, test)
    send("raised", test=test, raised=None)
    return result


class Reporter:
    """evsys's pytest plugin: each fact reported as it happens, never stored for later (the tests can reach
    this object): the test function's own outcome (the witness), xfails from outside the test files, each
    phase's report, operands that equal anything (`always_equal`, what the test files' assertions compare
    through)."""

    def __init__(self) -> None:
        self.current: Any = None
        self.config: Any = None

    def pytest_configure(self, config: Any) -> None:
        """Keep the config: its hooks are checked after each test."""
        self.config = config

    def pytest_load_initial_conftests(self, early_config: Any) -> None:
        """pytest's own setup of its classes is done (`legacypath` runs first), no conftest is loaded: the
        audit hook takes its snapshot of pytest's machinery now."""
        send("ready")

    def pytest_runtest_call(self, item: Any) -> None:
        """(tryfirst) Arm the witness: the test function is called through it (the runner then requires its
        line before the call's report)."""
        self.current = item.nodeid
        if type(item) is _PYTEST.Function:
            item.obj = _PARTIAL(witness, item.obj, item.nodeid)
            send("armed", test=item.nodeid)

    def pytest_runtest_makereport(self, item: Any, call: Any) -> None:
        """Report xfails raised by a `pytest.xfail()` call outside the test files."""
        excinfo = call.excinfo
        if excinfo is not None and isinstance(excinfo.value, _PYTEST.xfail.Exception):
            entries = list(excinfo.traceback)
            caller = str(entries[-2].path) if len(entries) >= 2 else ""
            if not _TRUST.trusted(caller) or not caller.startswith(_TRUST.root):
                send("xfail_outside", test=item.nodeid)

    def pytest_runtest_logreport(self, report: Any) -> None:
        """Report the phase (and, after a call, a hook implementation from the repository's code)."""
        fields = {"test": report.nodeid, "when": report.when, "status": _status(report)}
        if report.when == "call":
            fields["tampered"] = _foreign_hook(self.config, _TRUST)
        send("outcome", **fields)

    def always_equal(self, left: Any, right: Any, equal: bool) -> bool:
        """`left == right` (or `!=`), failing the test when an operand of the repository's own type equals a
        fresh sentinel."""
        for operand in (left, right):
            module = sys.modules.get(getattr(type(operand), "__module__", ""), None)
            if _TRUST.trusted(getattr(module, "__file__", None)) or not _accepts(operand):
                continue
            kind = type(operand)
            evidence = f"{self.current}: {kind.__module__}.{kind.__qualname__} equals any object"
            send("always_equal", test=self.current, evidence=evidence)
            raise AssertionError("evsys: " + evidence)
        return left == right if equal else left != right


def _foreign_hook(config: Any, trust: Any) -> "str | None":
    """A hook implementation of the call or report hooks from the repository's code (None if none)."""
    for hook in HOOKS:
        for impl in getattr(config.hook, hook).get_hookimpls():
            code = getattr(impl.function, "__code__", None)
            if code is None or not trust.trusted(code.co_filename):
                return f"a {hook} implementation from {getattr(code, 'co_filename', '?')}"
    return None


def watched(reporter: object) -> "dict[str, Mapping[str, Any]]":
    """The namespaces the audit hook compares before each test: pytest's and pluggy's reporting machinery,
    json, and this runner's own (module, reporter)."""
    import _pytest.python
    import _pytest.reports
    import _pytest.runner

    names = ["_pytest.runner", "_pytest.reports", "_pytest.python", "_pytest.main", "_pytest.skipping"]
    names += ["_pytest.outcomes", "_pytest.nodes", "_pytest.assertion.rewrite", "json", "json.encoder"]
    names += [n for n in sys.modules if n.startswith("pluggy.") or n == "pluggy"]
    spaces: dict[str, Mapping[str, Any]] = {n: vars(sys.modules[n]) for n in names if n in sys.modules}
    spaces["runner_child"] = vars(sys.modules[__name__])
    spaces["the trusted paths"] = vars(_TRUST)
    classes = [_pytest.reports.TestReport, _pytest.runner.CallInfo, _pytest.python.Function, type(reporter)]
    classes.append(type(_TRUST))
    for kind in classes:
        for base in kind.__mro__[:-1]:
            spaces[f"{base.__module__}.{base.__qualname__}"] = base.__dict__
    return spaces


def _accepts(operand: object) -> bool:
    """Whether `operand` equals (or is not unequal to) a fresh sentinel."""
    try:
        return bool(operand == object()) or not bool(operand != object())
    except Exception:
        return False


def hook_assertions(reporter: Any, trust: Any) -> None:
    """Every `==` / `!=` of a rewritten assertion goes through `reporter.always_equal`; pytest's cached
    rewritten test files are never read (the cache was written without the check)."""
    import ast

    import _pytest.assertion.rewrite as rewrite

    original = rewrite.rewrite_asserts

    def rewrite_asserts(mod: Any, *args: Any, **kwargs: Any) -> None:
        original(mod, *args, **kwargs)
        for node in ast.walk(mod):
            if _is_assert_compare(node):
                node.value = _checked(ast, node.value)  # type: ignore[attr-defined]

    rewrite.rewrite_asserts = rewrite_asserts
    read_pyc = rewrite._read_pyc

    def _read_pyc(source: Any, *args: Any, **kwargs: Any) -> Any:
        under_tree = str(source).startswith(trust.root)
        return None if under_tree else read_pyc(source, *args, **kwargs)

    rewrite._read_pyc = _read_pyc
    rewrite._evsys_eq = reporter.always_equal  # type: ignore[attr-defined]


def _checked(ast: Any, compare: Any) -> Any:
    """`@pytest_ar._evsys_eq(left, right, is_eq)` in place of `left == right` (or `!=`), at its position."""
    place = lambda node: ast.copy_location(node, compare)  # noqa: E731
    func = place(ast.Attribute(value=place(ast.Name(id="@pytest_ar", ctx=ast.Load())), attr="_evsys_eq"))
    func.ctx = ast.Load()
    flag = place(ast.Constant(isinstance(compare.ops[0], ast.Eq)))
    return place(ast.Call(func=func, args=[compare.left, compare.comparators[0], flag], keywords=[]))


def _is_assert_compare(node: object) -> bool:
    """An assignment pytest's rewriting made of one `==` or `!=` comparison."""
    import ast

    if not isinstance(node, ast.Assign) or len(node.targets) != 1 or not isinstance(node.value, ast.Compare):
        return False
    target, ops = node.targets[0], node.value.ops
    named = isinstance(target, ast.Name) and target.id.startswith("@py_assert")
    return named and len(ops) == 1 and isinstance(ops[0], (ast.Eq, ast.NotEq))


def _finish(code: int) -> None:
    """The run's last report line (accepted by the audit hook only from here, called by `child`)."""
    sys.audit("evsys.finish", code)


def _load_guard() -> Any:
    """runner_guard.py, beside this file (its directory is root's)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("evsys_runner_guard", GUARD)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def child() -> int:
    """Read the setup, harden the process, run pytest with evsys's reporter, then sign the run's end."""
    setup = read_setup()
    fd, root = setup["fd"], setup["root"]
    os.set_inheritable(fd, False)  # nothing the tests start inherits it
    drop_ctypes()
    sys.path[:] = [p for p in sys.path if p not in ("", ".", os.getcwd(), root)] + [root]
    import pytest

    global _AUDIT
    guard = _load_guard()
    trust = guard.Trust(root, setup["test_files"])
    _bind(pytest, trust)
    reporter = Reporter()
    hook_assertions(reporter, trust)
    finish = (_finish.__code__, child.__code__)
    guard.install_guard(
        bytes.fromhex(setup.pop("key")), fd, trust, (send.__code__,), finish, watched(reporter)
    )
    _AUDIT = sys.audit
    main = pytest.main
    code = int(main(sys.argv[1:] + setup["ids"], plugins=[reporter]))
    _finish(code)
    return code


if __name__ == "__main__":
    sys.exit(child())
