"""Every error class that declares a trial failure cause declares one the results know: a cause outside
`FailureCause` would be recorded as a plain `agent_error` without anyone noticing."""

from __future__ import annotations

import importlib
import pkgutil

import evsys
from evsys.records import FailureCause


def _evsys_exception_classes() -> list[type]:
    for info in pkgutil.walk_packages(evsys.__path__, "evsys."):
        try:
            importlib.import_module(info.name)
        except ImportError:  # an optional extra that is not installed
            continue
    seen, todo = [], [Exception]
    while todo:
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            if sub.__module__.startswith("evsys."):
                seen.append(sub)
    return seen


def test_declared_failure_causes_are_known_causes():
    declared = {
        cls: cls.__dict__["failure_cause"]
        for cls in _evsys_exception_classes()
        if "failure_cause" in cls.__dict__
    }
    assert len(declared) >= 8  # agent, model, verifier and harness errors at least
    unknown = {
        f"{cls.__module__}.{cls.__qualname__}": cause
        for cls, cause in declared.items()
        if cause not in set(FailureCause)
    }
    assert unknown == {}
