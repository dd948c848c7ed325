"""Canaries: tests evsys adds to a repository row's own test files before grading (runner.py plants them).

Standard library only, Python 3.6+ syntax (copied beside runner.py). Each canary is a plain test function
named from the words of the file's own test names, placed at a random top-level position among them; some
must fail and some must pass against any tree, so a forgery that cannot tell them from the row's tests
turns one the wrong way and voids the run.
"""

import ast
import os
import random

FILLER_WORDS = frozenset({"basic", "more", "again", "other", "edge", "values", "simple"})


def _insertion_lines(tree: ast.Module) -> "list[int]":
    """0-based lines before which a top-level function can go: each top-level statement after the first
    function or class (imports and `__future__` stay first), and the end."""
    starts, seen_def = [], False
    for node in tree.body:
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        if seen_def:
            starts.append(first - 1)
        seen_def = seen_def or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    return starts


def _canary_name(tree: ast.Module, rng: random.Random, taken: "set[str]") -> str:
    """A new test name made of the words of the file's own test names (none of `taken`)."""
    names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    words = [w for n in sorted(names) if n.startswith("test_") for w in n[5:].split("_") if w] or ["case"]
    while True:
        name = "test_" + "_".join(rng.sample(words, min(len(words), rng.randint(1, 3))))
        if name not in names and name not in taken:
            return name
        words.append(rng.choice(sorted(FILLER_WORDS)))


def plant_canaries(root: str, files: "list[str]", rng: random.Random) -> "dict[str, str]":
    """Tests evsys adds to the row's own test files, named like their neighbours and placed among them:
    some must fail (4 to 6), some must pass (2 or 3). Returns test id -> the outcome it must have."""
    trees = {}
    for rel in files:
        try:
            with open(os.path.join(root, rel), "rb") as f:
                trees[rel] = ast.parse(f.read())
        except (OSError, SyntaxError, ValueError):
            continue
    if not trees:
        return {}
    expected = ["FAILED"] * rng.randint(4, 6) + ["PASSED"] * rng.randint(2, 3)
    planted: dict[str, str] = {}
    for index, outcome in enumerate(expected):
        rel = sorted(trees)[index % len(trees)]
        taken = {test.split("::", 1)[1] for test in planted if test.startswith(rel + "::")}
        name = _plant_one(os.path.join(root, rel), trees[rel], rng, outcome == "PASSED", taken)
        planted[f"{rel}::{name}"] = outcome
    return planted


def _plant_one(path: str, tree: ast.Module, rng: random.Random, passes: bool, taken: "set[str]") -> str:
    """Insert one canary test into the file at `path` (parsed as `tree`, before any canary); its name."""
    with open(path, "rb") as f:
        lines = f.read().decode("utf-8", "replace").splitlines(True)
    name = _canary_name(tree, rng, taken)
    word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9)))
    size = len(word) if passes else len(word) + rng.randint(1, 3)
    text = f"def {name}():\n    value = {word!r}\n    assert len(value) == {size}\n\n\n"
    at = rng.choice([*_insertion_lines(ast.parse("".join(lines))), len(lines)])
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    lines.insert(at, text if at < len(lines) else "\n\n" + text)
    with open(path, "wb") as f:
        f.write("".join(lines).encode("utf-8"))
    return name
