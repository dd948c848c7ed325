"""Importing user code by name: a dotted module or a `.py` file, and objects as `module:attr`.

Verifier functions, custom agents and dataset verifier modules are referenced by such names so that any
process (a spawned worker, a Ray node) can load them again. A file path is imported under a stable synthetic
module name derived from its absolute path, so importing it twice returns the same module.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

FILE_MODULE_PREFIX = "evsys_user_modules"
_FILE_IMPORTS = threading.RLock()  # reentrant: a user module may import another by file


def is_file_reference(spec: str) -> bool:
    """True when `spec` names a file (`x.py`, `dir/x`) rather than a dotted module."""
    return spec.endswith(".py") or "/" in spec or "\\" in spec


def import_module_or_file(spec: str | Path, base_dir: Path | None = None) -> Any:
    """Import a dotted module name or a `.py` file path (relative paths resolve against `base_dir`, default
    the current directory). Importing the same file twice returns the already-loaded module."""
    text = str(spec)
    if not is_file_reference(text):
        return importlib.import_module(text)
    path = Path(text)
    if not path.is_absolute():
        path = (base_dir or Path.cwd()) / path
    path = path.resolve()
    if not path.is_file():
        raise FileNotFoundError(f"module file {path} does not exist")
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    module_name = f"{FILE_MODULE_PREFIX}.{path.stem}_{digest}"
    # one import at a time: concurrent trials load the same file from worker threads, and a module is in
    # sys.modules (half-initialised) while it runs
    with _FILE_IMPORTS:
        if module_name in sys.modules:
            return sys.modules[module_name]
        module_spec = importlib.util.spec_from_file_location(module_name, path)
        if module_spec is None or module_spec.loader is None:
            raise ImportError(f"cannot import {path}")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[module_name] = module
        try:
            module_spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[module_name]
            raise
        return module


def importable_name(obj: Any) -> str | None:
    """`module:qualname` (or `/abs/file.py:qualname` for a module imported from a file) under which another
    process can import `obj` again; None when it cannot (a lambda, a local function, an instance)."""
    target = obj if hasattr(obj, "__qualname__") else None
    if target is None or "<" in target.__qualname__:
        return None
    module = sys.modules.get(getattr(target, "__module__", "") or "")
    if module is None:
        return None
    found: Any = module
    for part in target.__qualname__.split("."):
        found = getattr(found, part, None)
    if found is not obj:
        return None
    if module.__name__.startswith(FILE_MODULE_PREFIX + "."):
        return f"{module.__file__}:{target.__qualname__}"
    if module.__name__ == "__main__":
        return None
    return f"{module.__name__}:{target.__qualname__}"


def lazy_exports(
    package: str,
    exports: dict[str, str],
    needs: tuple[str, ...],
    requirement: str,
    *,
    match_message: bool = False,
) -> Callable[[str], Any]:
    """A package's module-level `__getattr__` that imports each name of `exports` (name -> module) on first
    use, so the package imports without the optional framework behind it. An ImportError of a top-level module
    in `needs` (or, with `match_message`, one whose message names one) becomes an ImportError naming
    `requirement` (`"<what>: pip install ..."`)."""

    def load(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        try:
            return getattr(importlib.import_module(module), name)
        except ImportError as exc:
            missing = (exc.name or "").split(".")[0] in needs
            if missing or (match_message and any(n in str(exc) for n in needs)):
                raise ImportError(f"{package}.{name} needs {requirement}") from exc
            raise

    return load
