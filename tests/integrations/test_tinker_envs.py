"""tinker-cookbook environments over evsys tasks (evsys.integrations.tinker.envs), driven by the cookbook's
own rollout code (`do_group_rollout`): every env is an evsys trial in its own sandbox, its reward the task's
verifier chain's; the policy is a scripted one (to reach known rewards) or the local engine's
`LocalTokenCompleter` (token ids and logprobs checked by teacher forcing)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

pytest.importorskip("tinker_cookbook.rl.rollouts", reason="tinker-cookbook is not installed (evsys[tinker])")

import tinker
from tinker_cookbook import tokenizer_utils
from tinker_cookbook.completers import StopCondition, TokenCompleter, TokensWithLogprobs
from tinker_cookbook.rl.rollouts import do_group_rollout

from evsys.integrations.tinker import EvsysDatasetBuilder, EvsysRLDataset, LocalTokenCompleter
from evsys.model.local.client import LocalModelClient
from evsys.model.local.engine import LocalEngine
from evsys.task.python import VerifiedTask
from evsys.testing.tiny_model import DEMO_RECIPE, build_tiny_model
from evsys.verify.functions import register_verifier, unregister_verifier

REPO = Path(__file__).resolve().parents[2]
CREATE_FILE = REPO / "examples" / "tasks" / "create-file"
GREETING = {"path": "/app/greeting.txt", "content": "Hello from evsys!\n"}
RENDERER = "qwen3_instruct"  # ChatML with Hermes tool calls, like the tiny model's template


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return build_tiny_model(DEMO_RECIPE)


class ScriptedPolicy(TokenCompleter):
    """Answers turn n with `replies[n]`: a tool call (name, arguments) or plain text. At turn `hang_at` it
    waits forever (`hanging` counts the calls doing so)."""

    def __init__(self, model_dir: Path, replies: list[tuple[str, dict] | str], hang_at: int | None = None):
        self.tokenizer = tokenizer_utils.get_tokenizer(str(model_dir))
        self.replies = replies
        self.hang_at = hang_at
        self.hanging = 0
        self.hung = asyncio.Condition()
        self.end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")

    async def __call__(
        self, model_input: tinker.ModelInput, stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        prompt = self.tokenizer.decode(model_input.to_ints())
        turn = prompt.count("<|im_start|>assistant") - 1
        if turn == self.hang_at:
            async with self.hung:
                self.hanging += 1
                self.hung.notify_all()
            await asyncio.Event().wait()
        reply = self.replies[turn]
        if isinstance(reply, tuple):
            call = {"name": reply[0], "arguments": reply[1]}
            reply = f"<tool_call>\n{json.dumps(call)}\n</tool_call>"
        tokens = [*self.tokenizer.encode(reply, add_special_tokens=False), self.end]
        return TokensWithLogprobs(tokens=tokens, maybe_logprobs=[0.0] * len(tokens))


def trials(jobs: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(jobs.glob("*/*/result.json"))]


@pytest.mark.needs_sandbox
async def test_task_directory_envs_are_trials_rewarded_by_the_verifier(model_dir: Path, tmp_path: Path):
    """write_file then submit solves create-file (reward 1.0 from tests/test.sh, in the sandbox); a final
    answer without any tool call is submitted and scores 0.0. Every episode is a recorded trial."""
    dataset = await EvsysRLDataset.create(
        CREATE_FILE, model_name=str(model_dir), renderer_name=RENDERER, group_size=2, jobs_dir=tmp_path
    )
    async with dataset:
        assert len(dataset) == 1
        [builder] = dataset.get_batch(0)
        solve = ScriptedPolicy(model_dir, [("write_file", GREETING), ("submit", {})])
        group = await do_group_rollout(builder, solve)
        assert group.get_total_rewards() == [1.0, 1.0]
        first = group.trajectories_G[0]
        assert len(first.transitions) == 2 and first.transitions[-1].metrics["evsys/reward"] == 1.0
        observation = tokenizer_utils.get_tokenizer(str(model_dir)).decode(first.transitions[1].ob.to_ints())
        assert "wrote 18 bytes to /app/greeting.txt" in observation  # the tool ran in the sandbox
        idle = ScriptedPolicy(model_dir, ["I will not do it."])
        group = await do_group_rollout(builder, idle)
        assert group.get_total_rewards() == [0.0, 0.0]
        assert builder.episodes == []  # the cookbook's cleanup ended and released every episode
    recorded = trials(tmp_path)
    assert sorted(t["reward"] for t in recorded) == [0.0, 0.0, 1.0, 1.0]
    assert dataset.service.pool.idle_count == 0  # close() stopped the idle sandboxes
    [job] = [json.loads(p.read_text()) for p in tmp_path.glob("*/result.json")]  # noqa: ASYNC240
    assert job["n_done"] == 4


async def test_dataset_builder_for_the_cookbooks_train_config(model_dir: Path, tmp_path: Path):
    """`EvsysDatasetBuilder` (a chz `RLDatasetBuilder`) builds the training dataset from a dataset path."""
    builder = EvsysDatasetBuilder(
        dataset=str(REPO / "examples" / "tasks"),
        model_name=str(model_dir),
        renderer_name=RENDERER,
        batch_size=3,
        group_size=2,
        jobs_dir=str(tmp_path),
        job_name="train",
    )
    train, test = await builder()
    assert isinstance(train, EvsysRLDataset) and test is None
    async with train:
        names = [b.task.name for i in range(len(train)) for b in train.get_batch(i)]  # type: ignore[attr-defined]
        assert "evsys/create-file" in names and len(names) == len(set(names)) > 3
        assert all(len(train.get_batch(i)) <= 3 for i in range(len(train)))
    assert (tmp_path / "train" / "config.json").is_file()


@pytest.mark.needs_sandbox
async def test_python_task_answer_is_scored_by_its_verifier(model_dir: Path, tmp_path: Path):
    """A Python task in memory: the model's final answer is what its registered verifier scores."""
    register_verifier("tinker-envs-answer", lambda completion: 1.0 if completion.strip() == "42" else 0.0)
    try:
        tasks = [VerifiedTask(id="six-times-seven", prompt="What is 6*7?", verifier="tinker-envs-answer")]
        dataset = await EvsysRLDataset.create(
            tasks, model_name=str(model_dir), renderer_name=RENDERER, group_size=1, jobs_dir=tmp_path
        )
        async with dataset:
            [builder] = dataset.get_batch(0)
            right = await do_group_rollout(builder, ScriptedPolicy(model_dir, ["42"]))
            wrong = await do_group_rollout(builder, ScriptedPolicy(model_dir, ["41"]))
        assert (right.get_total_rewards(), wrong.get_total_rewards()) == ([1.0], [0.0])
    finally:
        unregister_verifier("tinker-envs-answer")


@pytest.mark.needs_sandbox
async def test_cancelled_rollout_still_ends_and_records_its_episodes(model_dir: Path, tmp_path: Path):
    """A rollout cancelled mid-episode: the cookbook's cleanup ends every episode, each is still verified
    and recorded, and no sandbox is left running."""
    dataset = await EvsysRLDataset.create(
        CREATE_FILE, model_name=str(model_dir), renderer_name=RENDERER, group_size=2, jobs_dir=tmp_path
    )
    async with dataset:
        [builder] = dataset.get_batch(0)
        policy = ScriptedPolicy(model_dir, [("write_file", GREETING)], hang_at=1)
        rollout = asyncio.ensure_future(do_group_rollout(builder, policy))
        async with policy.hung:  # both episodes have written the file and wait for their next action
            await policy.hung.wait_for(lambda: policy.hanging == 2)
        rollout.cancel()
        with pytest.raises(asyncio.CancelledError):
            await rollout
        assert builder.episodes == []
    recorded = trials(tmp_path)
    assert len(recorded) == 2 and all(t["reward"] == 1.0 for t in recorded)  # the file was written: verified
    assert dataset.service.pool.idle_count == 0


@pytest.mark.needs_sandbox
async def test_local_engine_policy_through_the_cookbook_rollout(model_dir: Path, tmp_path: Path):
    """`LocalTokenCompleter` as the cookbook's policy: each action's token ids and logprobs match a teacher-
    forced recompute of the observation it was sampled from; the episodes are rewarded and recorded."""
    policy = LocalTokenCompleter(LocalModelClient(str(model_dir)), max_tokens=24, seed=0)
    dataset = await EvsysRLDataset.create(
        CREATE_FILE,
        model_name=str(model_dir),
        renderer_name=RENDERER,
        group_size=2,
        max_turns=2,
        jobs_dir=tmp_path,
    )
    async with dataset:
        [builder] = dataset.get_batch(0)
        group = await do_group_rollout(builder, policy)
    engine = LocalEngine.load(model_dir)
    actions = [t for trajectory in group.trajectories_G for t in trajectory.transitions if t.ac.tokens]
    assert actions
    for transition in actions:
        recomputed = engine.score(transition.ob.to_ints(), transition.ac.tokens)
        assert max(abs(a - b) for a, b in zip(transition.ac.logprobs, recomputed, strict=True)) < 1e-3
    recorded = trials(tmp_path)
    assert len(recorded) == 2 and all(t["failure"] is None for t in recorded)  # submitted and verified
    for trajectory, total in zip(group.trajectories_G, group.get_total_rewards(), strict=True):
        penalties = sum(t.reward for t in trajectory.transitions)  # the cookbook's own, e.g. for its budget
        assert total == pytest.approx(penalties + 0.0)  # + the verifier's reward: the file was not written


def calc_repo_module():
    """tests/repo/calc_repo.py: a small git repository with bugs and SWE-bench-style rows on it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("calc_repo", REPO / "tests" / "repo" / "calc_repo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.needs_sandbox
@pytest.mark.slow
@pytest.mark.timeout(1800)
async def test_repository_rows_are_graded_by_their_tests(model_dir: Path, tmp_path: Path):
    """A repository row in memory: the fix typed into bash makes its FAIL_TO_PASS test pass (reward 1.0);
    looking around only scores 0.0."""
    from evsys.repo.rows import load_repo_rows

    calc = calc_repo_module()
    rows_file = calc.write_rows(
        tmp_path / "rows.jsonl", calc.calc_rows(*calc.make_calc_repo(tmp_path / "calc"))
    )
    [row] = [r for r in load_repo_rows(rows_file).tasks if r.instance_id == "calc-neg"]
    fix = "sed -i 's/    return a$/    return -a/' calc/__init__.py"
    dataset = await EvsysRLDataset.create(
        [row], model_name=str(model_dir), renderer_name=RENDERER, group_size=1, jobs_dir=tmp_path / "jobs"
    )
    async with dataset:
        [builder] = dataset.get_batch(0)
        fixed = await do_group_rollout(
            builder, ScriptedPolicy(model_dir, [("bash", {"command": fix}), "done"])
        )
        looked = await do_group_rollout(
            builder, ScriptedPolicy(model_dir, [("bash", {"command": "ls"}), "ok"])
        )
    assert (fixed.get_total_rewards(), looked.get_total_rewards()) == ([1.0], [0.0])
