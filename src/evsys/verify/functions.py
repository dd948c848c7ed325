"""Verifier functions: Python callables that score a completion host-side (never inside the agent's sandbox).

A verifier function is `fn(completion: str, **data) -> float | dict[str, float]`, sync or async. Register it
with `@verifier("name")` and refer to it by that name from a `VerifiedTask`, or by an import path
(`"pkg.mod:fn"` or `"path/to/file.py:fn"`). `run_verifier` calls it with the task's data fields as keyword
arguments (only those it declares, unless it takes `**kwargs`) plus the context it asks for: `trajectory`,
`task`, `rewards` (the rewards computed before it, e.g. a test script's reward.json), `prompt`.

`run_verifier` never raises into the caller: an exception, a missing data field, a non-finite or wrongly
typed return value, or a timeout all come back as `VerifierResult(error=...)` with no rewards, so one bad
item never takes down the other rollouts.
"""

from __future__ import annotations

import asyncio
import inspect
import numbers
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from evsys.records import Trajectory
from evsys.task.python import RESERVED_DATA_FIELDS, PromptTask, VerifiedTask
from evsys.util.imports import import_module_or_file, importable_name
from evsys.util.registry import Registry
from evsys.verify.base import VerifierError, VerifierResult, VerifierTimeoutError, finite_number

VerifierFn = Callable[..., Any]

CONTEXT_FIELDS = ("trajectory", "task", "rewards", "prompt")
"""Keyword arguments `run_verifier` may pass besides the data fields (data fields may not use these names)."""

RESERVED_FIELDS = RESERVED_DATA_FIELDS


class UnknownVerifierError(LookupError):
    """No verifier is registered under this name, or the import path does not resolve."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown verifier"


def _verifier_fn(name: str, loaded: object) -> VerifierFn:
    if not callable(loaded):
        raise TypeError(f"verifier {name!r} must be callable, got {type(loaded).__name__}")
    return loaded


VERIFIERS: Registry[VerifierFn] = Registry(
    "verifier", "evsys.verifiers", _verifier_fn, load_error=UnknownVerifierError
)
"""Verifier functions by name: `@verifier` registers in code; a package declares them in the `evsys.verifiers`
entry-point group (`name = "pkg.module:function"`), imported when the name is first used."""


def register_verifier(name: str, fn: VerifierFn, *, replace: bool = False) -> VerifierFn:
    """Register `fn` (any callable, e.g. a `RubricVerifier`) under `name`; returns `fn` unchanged.

    Registering the same function again (a re-imported module) is allowed; a different function under a taken
    name is an error unless `replace=True`.
    """
    if not isinstance(name, str) or not name.strip() or ":" in name:
        raise ValueError(f"verifier name must be a non-empty string without ':', got {name!r}")
    _verifier_fn(name, fn)
    existing = VERIFIERS.loaded(name)
    if existing is not None and not replace and _source_key(existing) != _source_key(fn):
        raise ValueError(
            f"verifier {name!r} is already registered to {_identity(existing)}; "
            f"pass replace=True to register {_identity(fn)} instead"
        )
    VERIFIERS.register(name, fn, replace=True)
    return fn


def verifier(name: str | None = None, *, replace: bool = False) -> Callable[[VerifierFn], VerifierFn]:
    """Decorator registering a verifier function under `name` (default: the function's own name)."""

    def decorate(fn: VerifierFn) -> VerifierFn:
        return register_verifier(name or fn.__name__, fn, replace=replace)

    return decorate


def unregister_verifier(name: str) -> None:
    """Remove a registered verifier (no error when absent)."""
    VERIFIERS.unregister(name)


def registered_verifiers() -> list[str]:
    """The registered verifier names (in code and as entry points), sorted."""
    return VERIFIERS.names()


def _identity(fn: Any) -> str:
    """A readable name for a verifier callable: module.qualname (of its class, for callable objects)."""
    target = fn if inspect.isfunction(fn) or inspect.ismethod(fn) else type(fn)
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', repr(target))}"


def _source_key(fn: Any) -> tuple[Any, ...]:
    """What makes two registrations "the same verifier": a function defined at the same source location
    (a module imported twice under different names), or the very same callable object."""
    code = getattr(inspect.unwrap(fn), "__code__", None) if inspect.isfunction(fn) else None
    if code is not None:
        return (fn.__qualname__, code.co_filename, code.co_firstlineno)
    return ("object", id(fn))


def import_verifier_module(spec: str | Path, base_dir: Path | None = None) -> Any:
    """Import a module so its `@verifier` functions register: a dotted module name or a `.py` file path
    (relative to `base_dir`, default the current directory); see `evsys.util.imports`."""
    return import_module_or_file(spec, base_dir)


def get_verifier(name_or_path: str, base_dir: Path | None = None) -> VerifierFn:
    """The verifier registered as `name_or_path`, or the callable an import path (`m:fn`, `f.py:fn`) names.

    A relative `.py` path is resolved against `base_dir` (e.g. the task directory; default: the current one).
    """
    if not isinstance(name_or_path, str) or not name_or_path:
        raise UnknownVerifierError(f"a verifier name must be a non-empty string, got {name_or_path!r}")
    if name_or_path in VERIFIERS:
        return VERIFIERS.get(name_or_path)
    if ":" not in name_or_path:
        known = ", ".join(registered_verifiers()) or "none"
        raise UnknownVerifierError(
            f"no verifier registered as {name_or_path!r} (registered: {known}); import the module that "
            f"defines it, or use an import path like 'pkg.module:function' or 'file.py:function'"
        )
    module_part, _, attr = name_or_path.rpartition(":")
    try:
        module = import_verifier_module(module_part, base_dir)
    except (ImportError, FileNotFoundError) as exc:
        raise UnknownVerifierError(
            f"verifier {name_or_path!r}: cannot import {module_part!r} ({exc})"
        ) from None
    fn: Callable[..., Any] | None = getattr(module, attr, None)
    if fn is None or not callable(fn):
        raise UnknownVerifierError(f"verifier {name_or_path!r}: {module_part!r} has no callable {attr!r}")
    return fn


def _accepted_kwargs(fn: VerifierFn) -> tuple[set[str], set[str], bool]:
    """(accepted keyword names, required keyword names, takes **kwargs) of `fn`, skipping the completion."""
    params = list(inspect.signature(fn).parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if not positional and not any(p.kind == p.VAR_POSITIONAL for p in params):
        raise TypeError("a verifier must take the completion as its first positional argument")
    rest = params[1:] if positional else params
    names = {p.name for p in rest if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    required = {p.name for p in rest if p.name in names and p.default is p.empty}
    var_kw = any(p.kind == p.VAR_KEYWORD for p in params)
    return names, required, var_kw


def _call_kwargs(
    fn: VerifierFn, name: str, data: Mapping[str, Any], ctx: Mapping[str, Any]
) -> dict[str, Any]:
    """The keyword arguments for `fn`: the data fields and context it declares (all of them for **kwargs)."""
    clash = sorted(set(data) & set(RESERVED_FIELDS))
    if clash:
        raise ValueError(f"task data field {clash[0]!r} clashes with a reserved verifier argument name")
    accepted, required, var_kw = _accepted_kwargs(fn)
    kwargs = {k: v for k, v in data.items() if var_kw or k in accepted}
    kwargs.update({k: v for k, v in ctx.items() if k in accepted or (var_kw and v is not None)})
    missing = sorted(required - set(kwargs))
    if missing:
        have = ", ".join(sorted(data)) or "none"
        raise ValueError(
            f"verifier {name!r} needs data field {missing[0]!r}, but the task's data has: {have}"
        )
    return kwargs


def normalize_rewards(value: Any, name: str) -> VerifierResult:
    """Turn a verifier's return value (number, bool, dict of numbers, VerifierResult) into an outcome."""
    if isinstance(value, VerifierResult):
        if value.error is None and not value.rewards:
            raise ValueError(f"verifier {name!r} returned an outcome without rewards or an error")
        if value.error is None:
            value.rewards = {
                k: finite_number(v, f"verifier {name!r} reward {k!r} is") for k, v in value.rewards.items()
            }
        return value
    if isinstance(value, Mapping):
        if not value:
            raise ValueError(f"verifier {name!r} returned an empty dict, expected at least one reward")
        rewards = {str(k): finite_number(v, f"verifier {name!r} reward {k!r} is") for k, v in value.items()}
        return VerifierResult(rewards=rewards)
    if not isinstance(value, numbers.Real):
        raise ValueError(
            f"verifier {name!r} returned {type(value).__name__}, expected a float or a dict of floats"
        )
    number = finite_number(value, f"verifier {name!r} returned a value that is")
    return VerifierResult(rewards={"reward": number})


async def _invoke(fn: VerifierFn, completion: str, kwargs: dict[str, Any]) -> Any:
    """Call `fn`: awaited when async, in a worker thread when sync (a slow verifier never blocks the loop)."""
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__):
        return await fn(completion, **kwargs)
    result = await asyncio.to_thread(fn, completion, **kwargs)
    if inspect.isawaitable(result):
        result = await result
    return result


def _error_outcome(exc: BaseException, name: str) -> VerifierResult:
    message = f"verifier {name!r} failed: {type(exc).__name__}: {exc}"
    timed_out = isinstance(exc, VerifierTimeoutError)  # e.g. its LLM judge never answered
    trace = "".join(traceback.format_exception(exc))
    return VerifierResult(error=message, traceback=trace, timed_out=timed_out)


async def run_verifier(
    name: str | VerifierFn,
    completion: str,
    data: Mapping[str, Any] | None = None,
    *,
    timeout_sec: float | None = None,
    base_dir: Path | None = None,
    **ctx: Any,
) -> VerifierResult:
    """Score `completion` with a verifier (registered name, import path or callable); never raises.

    `ctx` may carry `trajectory=`, `task=`, `rewards=`, `prompt=`; each is passed only to verifiers
    declaring it (or taking **kwargs). Errors, bad return values and timeouts are recorded in
    `VerifierResult.error`. An import path is imported in a worker thread, relative to `base_dir`.
    """
    label = name if isinstance(name, str) else _identity(name)
    unknown_ctx = sorted(set(ctx) - set(CONTEXT_FIELDS))
    if unknown_ctx:
        return VerifierResult(
            error=f"run_verifier got unknown context {unknown_ctx[0]!r}; known: {CONTEXT_FIELDS}"
        )
    try:
        if not isinstance(name, str):
            fn = name
        elif VERIFIERS.loaded(name) is not None:
            fn = VERIFIERS.get(name)
        else:
            fn = await asyncio.to_thread(get_verifier, name, base_dir)
        kwargs = _call_kwargs(fn, label, data or {}, ctx)
    except (UnknownVerifierError, VerifierError, ValueError, TypeError) as exc:
        return VerifierResult(error=str(exc))
    except Exception as exc:  # the verifier module itself failed to import
        return _error_outcome(exc, label)
    try:
        result = await asyncio.wait_for(_invoke(fn, completion, kwargs), timeout_sec)
    except TimeoutError:
        message = f"verifier {label!r} ran past its timeout of {timeout_sec:g} s"
        return VerifierResult(error=message, timed_out=True)
    except Exception as exc:
        return _error_outcome(exc, label)
    try:
        return normalize_rewards(result, label)
    except (VerifierError, ValueError) as exc:
        return VerifierResult(error=str(exc))


def completion_of(trajectory: Trajectory | None) -> str:
    """The completion a verifier scores for a trajectory: the message of its last agent step ("" if none)."""
    for step in reversed(trajectory.steps if trajectory is not None else []):
        if step.source == "agent":
            return step.message
    return ""


async def score_python_task(
    task: VerifiedTask | PromptTask,
    completion: str,
    *,
    trajectory: Any = None,
    timeout_sec: float | None = None,
) -> VerifierResult | None:
    """Score one Python task's completion host-side; None for a `PromptTask` (no verifier ever runs).

    This is what the engine calls after a Python task's agent has finished: the task's data fields, the
    prompt, the task itself and the trajectory are offered to the verifier.
    """
    if not isinstance(task, VerifiedTask):
        return None
    return await run_verifier(
        task.verifier,
        completion,
        task.data,
        timeout_sec=timeout_sec,
        trajectory=trajectory,
        task=task,
        prompt=task.prompt,
    )


def verifier_reference(name: str) -> str:
    """The name another process can load `name` by: for a registered module-level function, its importable
    name (`pkg.mod:fn`, or `/abs/file.py:fn` for a file module); else `name` unchanged (an import path
    already, or a registered object such as a `RubricVerifier` that the worker must register itself)."""
    fn = VERIFIERS.loaded(name)
    if fn is None:
        return name
    return importable_name(fn) or name
