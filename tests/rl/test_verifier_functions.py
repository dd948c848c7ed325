"""The verifier-function registry and `run_verifier`: sync/async, context, bad returns, errors, timeouts."""

from __future__ import annotations

import asyncio
import math
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from evsys.verify.functions import (
    UnknownVerifierError,
    VerifierResult,
    get_verifier,
    import_verifier_module,
    register_verifier,
    registered_verifiers,
    run_verifier,
    unregister_verifier,
    verifier,
)


@pytest.fixture
def names():
    """Names registered by a test are removed afterwards."""
    created: list[str] = []
    yield created
    for name in created:
        unregister_verifier(name)


def _register(names: list[str], name: str, fn) -> None:
    register_verifier(name, fn)
    names.append(name)


async def test_sync_verifier_gets_data_fields_and_runs_off_the_loop(names):
    loop_thread = threading.get_ident()
    seen = {}

    def contains(completion: str, needle: str) -> float:
        seen["thread"] = threading.get_ident()
        return float(needle in completion)

    _register(names, "t_contains", contains)
    outcome = await run_verifier("t_contains", "the cat sat", {"needle": "cat", "unused": 3})
    assert outcome == VerifierResult(rewards={"reward": 1.0})
    assert outcome.ok and outcome.reward == 1.0
    assert seen["thread"] != loop_thread


async def test_async_verifier_returning_a_dict(names):
    @verifier("t_multi")
    async def multi(completion: str, answer: str) -> dict[str, float]:
        await asyncio.sleep(0)
        return {"reward": float(completion == answer), "length": len(completion)}

    names.append("t_multi")
    outcome = await run_verifier("t_multi", "yes", {"answer": "yes"})
    assert outcome.rewards == {"reward": 1.0, "length": 3.0}


async def test_bool_and_numpy_returns_are_numbers(names):
    import numpy as np

    _register(names, "t_bool", lambda completion: completion == "ok")
    _register(names, "t_numpy", lambda completion: {"a": np.int64(2), "b": np.float32(0.5)})
    assert (await run_verifier("t_bool", "ok")).rewards == {"reward": 1.0}
    assert (await run_verifier("t_bool", "no")).rewards == {"reward": 0.0}
    assert (await run_verifier("t_numpy", "x")).rewards == {"a": 2.0, "b": 0.5}


async def test_context_is_passed_only_when_declared(names):
    got = {}

    def wants_trajectory(completion: str, *, trajectory=None) -> float:
        got["trajectory"] = trajectory
        return 1.0

    def takes_everything(completion: str, **kwargs) -> float:
        got["kwargs"] = kwargs
        return 0.5

    _register(names, "t_traj", wants_trajectory)
    _register(names, "t_all", takes_everything)
    assert (await run_verifier("t_traj", "x", {}, trajectory="T", task="ignored")).ok
    assert got["trajectory"] == "T"
    assert (await run_verifier("t_all", "x", {"a": 1}, task="K", rewards={"reward": 1.0})).ok
    assert got["kwargs"] == {"a": 1, "task": "K", "rewards": {"reward": 1.0}}


async def test_a_raising_verifier_records_the_error_and_others_are_unaffected(names):
    def boom(completion: str) -> float:
        raise RuntimeError("grader crashed")

    _register(names, "t_boom", boom)
    _register(names, "t_one", lambda completion: 1.0)
    outcomes = await asyncio.gather(
        run_verifier("t_one", "a"), run_verifier("t_boom", "b"), run_verifier("t_one", "c")
    )
    assert [o.rewards for o in outcomes] == [{"reward": 1.0}, {}, {"reward": 1.0}]
    failed = outcomes[1]
    assert not failed.ok and failed.rewards == {}
    assert "t_boom" in failed.error and "RuntimeError: grader crashed" in failed.error
    assert "grader crashed" in failed.traceback


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (math.nan, "expected a finite number"),
        (math.inf, "expected a finite number"),
        ("1.0", "returned str, expected a float or a dict of floats"),
        (None, "returned NoneType"),
        ({"reward": "high"}, "reward 'reward' is str"),
        ({"reward": math.nan}, "expected a finite number"),
        ({}, "empty dict"),
        (VerifierResult(), "an outcome without rewards or an error"),
        (VerifierResult(rewards={"reward": math.inf}), "expected a finite number"),
    ],
)
async def test_bad_return_values_are_recorded_errors(names, value, expected):
    _register(names, "t_bad", lambda completion: value)
    outcome = await run_verifier("t_bad", "x")
    assert outcome.rewards == {}
    assert expected in outcome.error
    assert "t_bad" in outcome.error


async def test_missing_data_field_names_the_field_and_what_the_task_has(names):
    _register(names, "t_needs", lambda completion, answer: 1.0)
    outcome = await run_verifier("t_needs", "x", {"answr": 4})
    assert outcome.error == "verifier 't_needs' needs data field 'answer', but the task's data has: answr"


async def test_unknown_name_lists_the_registered_ones(names):
    _register(names, "t_known", lambda completion: 1.0)
    outcome = await run_verifier("t_nope", "x")
    assert "no verifier registered as 't_nope'" in outcome.error
    assert "t_known" in outcome.error
    with pytest.raises(UnknownVerifierError, match="t_known"):
        get_verifier("t_nope")


async def test_reserved_data_field_is_an_error(names):
    _register(names, "t_plain", lambda completion, **kw: 1.0)
    outcome = await run_verifier("t_plain", "x", {"task": "shadow"})
    assert "'task' clashes with a reserved verifier argument" in outcome.error


async def test_timeout_is_recorded(names):
    release = asyncio.Event()

    async def stuck(completion: str) -> float:
        await release.wait()
        return 1.0

    _register(names, "t_stuck", stuck)
    outcome = await run_verifier("t_stuck", "x", timeout_sec=0.01)
    assert outcome.error == "verifier 't_stuck' ran past its timeout of 0.01 s"


async def test_import_path_and_file_path(tmp_path: Path):
    module = tmp_path / "my_checks.py"
    module.write_text(
        "def starts_with_yes(completion):\n    return completion.startswith('yes')\n", encoding="utf-8"
    )
    outcome = await run_verifier(f"{module}:starts_with_yes", "yes indeed")
    assert outcome.rewards == {"reward": 1.0}
    assert get_verifier("evsys.trajectory.advantages:mean_advantages").__name__ == "mean_advantages"
    bad = await run_verifier(f"{module}:missing", "x")
    assert "has no callable 'missing'" in bad.error
    gone = await run_verifier("no_such_module_xyz:fn", "x")
    assert "cannot import 'no_such_module_xyz'" in gone.error


def test_importing_a_file_twice_returns_the_same_module(tmp_path: Path):
    module = tmp_path / "twice.py"
    module.write_text("COUNT = 1\n", encoding="utf-8")
    assert import_verifier_module(module) is import_verifier_module(str(module))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        import_verifier_module(tmp_path / "absent.py")


def test_registering_a_different_function_under_a_taken_name_fails(names):
    def first(completion):
        return 1.0

    def second(completion):
        return 0.0

    _register(names, "t_taken", first)
    register_verifier("t_taken", first)  # re-registering the same function is fine
    with pytest.raises(ValueError, match="already registered"):
        register_verifier("t_taken", second)
    register_verifier("t_taken", second, replace=True)
    assert get_verifier("t_taken") is second
    assert "t_taken" in registered_verifiers()
    with pytest.raises(ValueError, match="without ':'"):
        register_verifier("a:b", first)


async def test_a_verifier_without_a_completion_parameter_is_an_error(names):
    _register(names, "t_noargs", lambda: 1.0)
    outcome = await run_verifier("t_noargs", "x")
    assert "must take the completion as its first positional argument" in outcome.error


async def test_score_python_task_offers_data_prompt_task_and_trajectory(names):
    from evsys.records import AgentInfo, TrajectoryRecorder
    from evsys.task.python import PromptTask, VerifiedTask
    from evsys.verify.functions import completion_of, score_python_task

    seen = {}

    def graded(completion: str, answer: int, *, prompt: str, task, trajectory) -> float:
        seen.update(prompt=prompt, task=task, trajectory=trajectory)
        return float(completion.strip() == str(answer))

    _register(names, "t_graded", graded)
    recorder = TrajectoryRecorder("s1", AgentInfo(name="loop"))
    recorder.add("user", "What is 2+2?")
    recorder.add("agent", "4")
    trajectory = recorder.build()
    task = VerifiedTask(id="q", prompt="What is 2+2?", verifier="t_graded", data={"answer": 4})
    outcome = await score_python_task(task, completion_of(trajectory), trajectory=trajectory)
    assert outcome.rewards == {"reward": 1.0}
    assert seen == {"prompt": "What is 2+2?", "task": task, "trajectory": trajectory}
    assert await score_python_task(PromptTask(id="g", prompt="Write a haiku"), "words") is None
    assert (
        completion_of(None) == ""
        and completion_of(TrajectoryRecorder("s2", AgentInfo(name="x")).build()) == ""
    )


async def test_relative_file_path_resolves_against_base_dir_and_import_errors_are_recorded(tmp_path: Path):
    (tmp_path / "rel_checks.py").write_text("def always(completion):\n    return 0.5\n", encoding="utf-8")
    (tmp_path / "broken_checks.py").write_text("raise RuntimeError('module is broken')\n", encoding="utf-8")
    outcome = await run_verifier("rel_checks.py:always", "x", base_dir=tmp_path)
    assert outcome.rewards == {"reward": 0.5}
    broken = await run_verifier("broken_checks.py:fn", "x", base_dir=tmp_path)
    assert "RuntimeError: module is broken" in broken.error


def test_the_same_file_imported_under_two_names_registers_once(tmp_path: Path, names, monkeypatch):
    (tmp_path / "twin_checks.py").write_text(
        "from evsys.verify.functions import verifier\n\n"
        "@verifier('t_twin')\ndef twin(completion):\n    return 1.0\n",
        encoding="utf-8",
    )
    names.append("t_twin")
    import_verifier_module(tmp_path / "twin_checks.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    import_verifier_module("twin_checks")  # same source, different module name: not a conflict
    assert get_verifier("t_twin").__module__ == "twin_checks"


def test_two_different_callable_objects_under_one_name_conflict(names):
    from test_rubrics import Const

    from evsys.verify.rubric import RubricVerifier, WeightedSum

    first = RubricVerifier(WeightedSum([Const(1.0)]))
    _register(names, "t_obj", first)
    register_verifier("t_obj", first)
    with pytest.raises(ValueError, match="already registered"):
        register_verifier("t_obj", RubricVerifier(WeightedSum([Const(0.0)])))


def test_a_verifier_file_imported_from_many_threads_at_once_is_complete_in_each(tmp_path):
    """Concurrent trials load one task's verifier file from worker threads: none may get a half-imported
    module (it sat in sys.modules while it ran, and a second thread took it without `verifier` defined)."""
    slow = tmp_path / "slow_verifier.py"
    slow.write_text("import time\ntime.sleep(0.3)\n\ndef verifier(completion):\n    return 1.0\n")
    with ThreadPoolExecutor(4) as pool:
        found = list(pool.map(lambda _: get_verifier(f"{slow}:verifier"), range(4)))
    assert all(callable(fn) for fn in found) and len({id(fn) for fn in found}) == 1
