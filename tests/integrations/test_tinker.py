"""tinker-cookbook's `harbor_rl` recipe runs its environments in evsys sandboxes (evsys.integrations.tinker).

The recipe's own code builds the environments (`HarborDatasetBuilder` -> `HarborEnvGroupBuilder.make_envs`,
its bash tool and its `HarborReward` grader) and its own rollout loop (`do_group_rollout`) drives them; only
the policy is scripted (no Tinker service is needed on the environment side): it answers with the recipe's
tool-call format, rendered by the recipe's Qwen3 renderer over the tiny model's tokenizer."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip(
    "tinker_cookbook.recipes.harbor_rl.harbor_env",
    reason="tinker-cookbook is not installed (pip install 'evsys[tinker]'; scripts/bootstrap.sh does it)",
)

import tinker
from tinker_cookbook import tokenizer_utils
from tinker_cookbook.completers import StopCondition, TokenCompleter, TokensWithLogprobs
from tinker_cookbook.recipes.harbor_rl.harbor_env import HarborDatasetBuilder, HarborTask
from tinker_cookbook.rl.rollouts import do_group_rollout
from tinker_cookbook.sandbox import SandboxInterface, SandboxTerminatedError

from evsys.integrations.tinker import EvsysSandbox, sandbox_factory
from evsys.testing.tiny_model import build_tiny_model

TASKS = Path(__file__).parent / "tasks"
TASK_NAMES = ("count-lines", "write-greeting")


class ScriptedPolicy(TokenCompleter):
    """A policy that first calls the recipe's bash tool with `command`, then ends its turn with text."""

    def __init__(self, tokenizer: object, command: str | None) -> None:
        self.tokenizer = tokenizer
        self.command = command
        self.end = tokenizer.convert_tokens_to_ids("<|im_end|>")  # type: ignore[attr-defined]

    async def __call__(
        self, model_input: tinker.ModelInput, stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        prompt = self.tokenizer.decode(model_input.to_ints())  # type: ignore[attr-defined]
        if self.command is not None and "<tool_response>" not in prompt:
            call = {"name": "bash", "arguments": {"command": self.command}}
            text = f"<tool_call>\n{json.dumps(call)}\n</tool_call>"
        else:
            text = "Done."
        tokens = [*self.tokenizer.encode(text, add_special_tokens=False), self.end]  # type: ignore[attr-defined]
        return TokensWithLogprobs(tokens=tokens, maybe_logprobs=[0.0] * len(tokens))


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return build_tiny_model()


def harbor_task(name: str) -> HarborTask:
    import tomllib

    task_dir = TASKS / name
    return HarborTask(
        task_name=name,
        instruction=(task_dir / "instruction.md").read_text(),
        task_dir=task_dir,
        config=tomllib.loads((task_dir / "task.toml").read_text()),
    )


async def run_recipe(model_dir: Path, solve: bool, group_size: int = 2) -> dict[str, list[float]]:
    """Each task's group through the recipe's builder and rollout loop; the rewards per task."""
    builder = HarborDatasetBuilder(
        tasks=[harbor_task(name) for name in TASK_NAMES],
        batch_size=len(TASK_NAMES),
        group_size=group_size,
        model_name=str(model_dir),
        renderer_name="qwen3_instruct",
        max_turns=3,
        sandbox_factory=sandbox_factory(),
    )
    train, _ = await builder()
    tokenizer = tokenizer_utils.get_tokenizer(str(model_dir))
    rewards: dict[str, list[float]] = {}
    for group_builder in train.get_batch(0):
        name = group_builder.task.task_name  # type: ignore[attr-defined]
        # the solution script is not in the sandbox: the policy types its commands into the bash tool
        command = (TASKS / name / "solution" / "solve.sh").read_text() if solve else None
        group = await do_group_rollout(group_builder, ScriptedPolicy(tokenizer, command))
        rewards[name] = group.get_total_rewards()
        sandboxes = group_builder._sandboxes  # type: ignore[attr-defined]
        assert sandboxes == [], "the recipe's cleanup releases every sandbox"
    return rewards


@pytest.mark.needs_sandbox
@pytest.mark.slow
def test_recipe_solves_both_tasks_in_evsys_sandboxes(model_dir: Path) -> None:
    rewards = asyncio.run(run_recipe(model_dir, solve=True))
    assert rewards == {name: [1.0, 1.0] for name in TASK_NAMES}


@pytest.mark.needs_sandbox
def test_recipe_scores_zero_when_the_policy_does_nothing(model_dir: Path) -> None:
    rewards = asyncio.run(run_recipe(model_dir, solve=False, group_size=1))
    assert rewards == {name: [0.0] for name in TASK_NAMES}


@pytest.mark.needs_sandbox
def test_sandbox_interface_behaviour(tmp_path: Path) -> None:
    canary = tmp_path / "host-canary.txt"
    canary.write_text("host secret")

    async def scenario() -> None:
        make = sandbox_factory()
        sb = await make(TASKS / "count-lines" / "environment", 600)
        try:
            assert isinstance(sb, SandboxInterface)
            # the task's environment: WORKDIR and the Dockerfile's COPY
            r = await sb.run_command("pwd && wc -l < data.txt")
            assert (r.exit_code, r.stdout.split()) == (0, ["/app", "5"])
            # the host's files are not there (positive control: the file exists on the host)
            assert canary.read_text() == "host secret"
            r = await sb.run_command(f"cat {canary}")
            assert r.exit_code != 0 and "host secret" not in r.stdout
            # write_file (parents created, +x), read_file (whole, capped, missing)
            assert (await sb.write_file("/opt/t/run.sh", "echo ran", executable=True)).exit_code == 0
            assert (await sb.run_command("/opt/t/run.sh")).stdout == "ran\n"
            assert (await sb.read_file("/app/data.txt")).stdout.splitlines()[0] == "alpha"
            assert (await sb.read_file("/app/data.txt", max_bytes=4)).stdout == "alph"
            assert (await sb.read_file("/app/missing")).exit_code != 0
            # output capped per stream; a timeout kills the command and says so
            r = await sb.run_command("head -c 5000 /dev/zero | tr '\\0' x", max_output_bytes=100)
            assert r.stdout == "x" * 100
            r = await sb.run_command("echo started; sleep 30", timeout=1)
            assert (r.exit_code, r.stdout, r.metrics["timed_out"]) == (124, "started\n", True)
            await sb.send_heartbeat()
        finally:
            await sb.cleanup()
        with pytest.raises(SandboxTerminatedError):
            await sb.run_command("true")
        with pytest.raises(SandboxTerminatedError):
            await sb.send_heartbeat()

    asyncio.run(scenario())


@pytest.mark.needs_sandbox
def test_sandbox_ends_after_its_lifetime() -> None:
    async def scenario() -> None:
        sb = await sandbox_factory()(TASKS / "write-greeting" / "environment", 1)
        assert isinstance(sb, EvsysSandbox)
        assert (await sb.run_command("true")).exit_code == 0
        await asyncio.sleep(1.5)
        with pytest.raises(SandboxTerminatedError):
            await sb.run_command("true")
        await sb.cleanup()

    asyncio.run(scenario())


def test_module_imports_without_tinker_cookbook() -> None:
    code = (
        "import sys; sys.modules['tinker_cookbook'] = None\n"
        "import evsys.integrations.tinker as t\n"
        "try:\n    t.sandbox_factory()\nexcept ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'evsys[tinker]'" in out.stdout
