"""The `tinker:` model provider samples through the real Tinker SDK, token-native.

Tinker is a cloud service: these tests point the SDK at `evsys.testing.tinker_standin`, a stand-in of its HTTP
service backed by the local engine over the tiny model, so the SDK's own client code (sessions, sampling
sessions, futures, protobuf responses) runs for real. A last test samples from the real service when
TINKER_API_KEY is set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("tinker", reason="the Tinker SDK is not installed (pip install 'evsys[tinker]')")

from evsys.model.local.engine import LocalEngine
from evsys.model.spec import ModelSpec, create_model_client
from evsys.model.tinker_client import TinkerModelClient
from evsys.testing.tinker_standin import STANDIN_API_KEY, TinkerStandIn
from evsys.testing.tiny_model import DEMO_LIST_FILES, DEMO_RECIPE, build_tiny_model

REPO = Path(__file__).resolve().parents[2]
CREATE_FILE = REPO / "examples" / "tasks" / "create-file"
SAVED_WEIGHTS = "tinker://standin-run/sampler_weights/final"


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return build_tiny_model(DEMO_RECIPE)


@pytest.fixture(scope="module")
def engine(model_dir: Path) -> LocalEngine:
    """The same weights, loaded apart from the stand-in, for teacher-forced recomputes."""
    return LocalEngine.load(model_dir)


@pytest.fixture(scope="module")
def standin(model_dir: Path) -> Iterator[tuple[TinkerStandIn, str]]:
    service = TinkerStandIn({str(model_dir): model_dir}, weights={SAVED_WEIGHTS: str(model_dir)})
    with service.serve() as url:
        yield service, url


def assert_teacher_forced(
    engine: LocalEngine, prompt: list[int], ids: list[int], logprobs: list[float]
) -> None:
    recomputed = engine.score(prompt, ids)
    assert len(logprobs) == len(ids) > 0
    assert max(abs(a - b) for a, b in zip(logprobs, recomputed, strict=True)) < 1e-3


@pytest.mark.needs_model
def test_loop_agent_trial_with_tinker_model_records_exact_tokens(
    model_dir: Path, engine: LocalEngine, standin: tuple[TinkerStandIn, str], tmp_path: Path
) -> None:
    """`evsys run -a loop -m tinker:<model>` against the stand-in: each turn's completion ids and logprobs are
    exactly what the service returned and match a teacher-forced recompute; usage is recorded."""
    service, url = standin
    jobs = tmp_path / "jobs"
    args = [sys.executable, "-m", "evsys.cli.main", "run", str(CREATE_FILE), "-a", "loop"]
    args += ["-m", f"tinker:{model_dir}", "--base-url", url, "--jobs-dir", str(jobs), "--job-name", "t"]
    args += ["--agent-kwarg", "max_turns=2", "--agent-kwarg", "max_tokens=48"]
    args += ["--agent-kwarg", "temperature=1.0", "--agent-timeout-multiplier", "10"]
    env = {**os.environ, "TINKER_API_KEY": STANDIN_API_KEY, "PYTHONPATH": str(REPO / "src")}
    before, finished = len(service.sampled), len(service.finished_sessions)
    done = subprocess.run(args, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    (result_path,) = (jobs / "t").glob("*/result.json")
    result = json.loads(result_path.read_text())
    assert result["failure"] is None, result["failure"]
    trajectory = json.loads((result_path.parent / "trajectory.json").read_text())
    turns = [s["metrics"] for s in trajectory["steps"] if s["source"] == "agent" and s.get("metrics")]
    served = service.sampled[before:]
    assert len(turns) == len(served) > 0
    for metrics, sample in zip(turns, served, strict=True):
        ids, logprobs, _ = sample.sequences[0]
        assert metrics["prompt_token_ids"] == sample.prompt_ids  # rendered by evsys, sampled from as sent
        assert metrics["completion_token_ids"] == ids
        assert metrics["logprobs"] == pytest.approx(logprobs, abs=1e-6)  # float32 on the wire
        assert_teacher_forced(engine, metrics["prompt_token_ids"], ids, metrics["logprobs"])
        assert (metrics["prompt_tokens"], metrics["completion_tokens"]) == (len(sample.prompt_ids), len(ids))
    assert trajectory["agent"]["model_name"] == f"tinker:{model_dir}"
    assert result["usage"]["completion_tokens"] == sum(len(s.sequences[0][0]) for s in served)
    assert len(service.finished_sessions) == finished + 1  # the job closed the client: its session finished


@pytest.mark.needs_model
async def test_client_samples_saved_weights_with_the_sdk_types(
    model_dir: Path, engine: LocalEngine, standin: tuple[TinkerStandIn, str]
) -> None:
    """A `tinker://` sampler path: the SDK looks up its base model; stop strings, seeds and the length stop
    come back as Tinker reports them."""
    _, url = standin
    spec = ModelSpec.parse(f"tinker:{SAVED_WEIGHTS}", base_url=url, api_key=STANDIN_API_KEY)
    client = create_model_client(spec)
    assert isinstance(client, TinkerModelClient)
    try:
        from evsys.model.base import SamplingParams

        greedy = SamplingParams(temperature=0, max_tokens=40, seed=7)
        first = await client.complete(DEMO_LIST_FILES, params=greedy)
        again = await client.complete(DEMO_LIST_FILES, params=greedy)
        assert first.completion_token_ids == again.completion_token_ids
        assert first.prompt_token_ids == engine.render(DEMO_LIST_FILES, None)[1]
        assert first.logprobs is not None and first.completion_token_ids is not None
        assert_teacher_forced(engine, first.prompt_token_ids, first.completion_token_ids, first.logprobs)
        assert first.usage.prompt_tokens == len(first.prompt_token_ids)
        short = await client.complete(DEMO_LIST_FILES, params=SamplingParams(max_tokens=2))
        assert short.finish_reason == "length" and len(short.completion_token_ids or []) == 2
    finally:
        await client.aclose()


async def test_sdk_failures_become_model_errors(model_dir: Path, standin: tuple[TinkerStandIn, str]) -> None:
    """A wrong key and an unknown model fail as the evsys model errors a trial records, not as SDK errors."""
    from evsys.model.errors import AuthenticationError, UnknownModelError

    _, url = standin
    wrong_key = create_model_client(ModelSpec.parse(f"tinker:{model_dir}", base_url=url, api_key="tml-wrong"))
    with pytest.raises(AuthenticationError):
        await wrong_key.complete(DEMO_LIST_FILES)
    unknown = create_model_client(
        ModelSpec.parse("tinker:no/such-model", base_url=url, api_key=STANDIN_API_KEY)
    )
    with pytest.raises(UnknownModelError, match="no/such-model"):
        await unknown.complete(DEMO_LIST_FILES)
    await unknown.aclose()


def test_provider_is_registered_and_names_its_extra() -> None:
    from evsys.model.registry import model_provider

    provider = model_provider("tinker")
    assert provider.defaults.api_key_env == "TINKER_API_KEY"
    code = (
        "import sys; sys.modules['tinker'] = None\n"
        "from evsys.model.spec import create_model_client\n"
        "try:\n    create_model_client('tinker:Qwen/Qwen3-8B')\nexcept Exception as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'evsys[tinker]'" in out.stdout


@pytest.mark.skipif(
    not os.environ.get("TINKER_API_KEY"),
    reason="set TINKER_API_KEY (and optionally TINKER_TEST_MODEL) to sample from the real Tinker service",
)
async def test_real_tinker_service_returns_token_exact_completions() -> None:
    """The real service: the recorded completion is what the sampler returned, and the service's own
    teacher-forced logprobs of prompt + completion agree with the sampling logprobs."""
    import tinker

    model = os.environ.get("TINKER_TEST_MODEL", "Qwen/Qwen3-4B-Instruct-2507")
    client = create_model_client(f"tinker:{model}")
    assert isinstance(client, TinkerModelClient)
    try:
        from evsys.model.base import SamplingParams

        done = await client.complete(
            [{"role": "user", "content": "Say hello."}], params=SamplingParams(max_tokens=16, seed=0)
        )
        prompt, ids, logprobs = done.prompt_token_ids, done.completion_token_ids, done.logprobs
        assert prompt and ids and logprobs and len(ids) == len(logprobs)
        sampler, _ = await client.sampler()
        scored = await sampler.compute_logprobs(tinker.ModelInput.from_ints(prompt + ids))
        assert max(abs(a - b) for a, b in zip(logprobs, scored[len(prompt) :], strict=True)) < 0.1
        assert done.usage.completion_tokens == len(ids)
    finally:
        await client.aclose()
