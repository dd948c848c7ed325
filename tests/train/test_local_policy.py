"""The local engine as a trainable policy: model and tokenizer for a trainer, and weights loaded between
generations with the version that sampled each completion recorded."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest

from evsys.model import SamplingParams
from evsys.model.local import LocalModelClient
from evsys.model.local.engine import LocalEngine
from evsys.testing.tiny_model import DEMO_GREETING

LONG = SamplingParams(temperature=1.0, max_tokens=24, ignore_eos=True)


@pytest.fixture
def own_client(tiny_model_dir: Path, tmp_path: Path) -> LocalModelClient:
    """A client over a private copy of the tiny model: its own engine, so loading weights touches no other
    test's engine (engines are shared per model path)."""
    copy = tmp_path / "model"
    shutil.copytree(tiny_model_dir, copy)
    return LocalModelClient(str(copy))


def perturbed(model: Any, scale: float = 0.05) -> dict[str, Any]:
    """The model's weights with seeded noise added to every floating tensor."""
    import torch

    generator = torch.Generator().manual_seed(7)
    return {
        name: value + scale * torch.randn(value.shape, generator=generator)
        if value.is_floating_point()
        else value
        for name, value in model.state_dict().items()
    }


def scorer(policy_model: Any, tokenizer: Any, state_dict: dict[str, Any]) -> LocalEngine:
    """An engine over a copy of the model holding `state_dict`: teacher forcing under those weights."""
    import copy

    model = copy.deepcopy(policy_model)
    model.load_state_dict(state_dict)
    return LocalEngine(model, tokenizer)


def gap(
    engine: LocalEngine, prompt_ids: list[int], completion_ids: list[int], logprobs: list[float]
) -> float:
    """Largest difference between recorded logprobs and a teacher-forced recompute under `engine`."""
    rescored = engine.score(prompt_ids, completion_ids)
    return max(abs(a - b) for a, b in zip(rescored, logprobs, strict=True))


async def test_policy_exposes_the_running_model_and_a_separate_trainable_copy(own_client):
    """policy.model / tokenizer are the engine's; the trainable copy has gradients and is not the engine's."""
    policy = await own_client.policy()
    engine = await own_client.engine()
    assert policy.model is engine.model and policy.tokenizer is engine.tokenizer
    assert policy.weights_version == 0
    done = await own_client.complete(DEMO_GREETING, params=LONG)
    assert done.weights_version == 0

    trainable = policy.trainable_copy()
    assert trainable is not policy.model and trainable.training
    assert all(p.requires_grad for p in trainable.parameters())
    import torch

    first = next(trainable.parameters())
    with torch.no_grad():
        first.add_(1.0)  # training the copy leaves the engine's weights alone
    assert not first.equal(next(policy.model.parameters()))


async def test_weights_load_between_generations_and_each_completion_names_its_version(own_client):
    """Generations in flight when new weights arrive finish on the old weights; later ones use the new ones.

    Every recorded logprob matches teacher forcing under the weights its recorded version names, and not
    under the other version's, so no generation saw a mix."""
    policy = await own_client.policy()
    old = {k: v.clone() for k, v in policy.model.state_dict().items()}
    new = perturbed(policy.model)
    prompt = policy.renderer.render(DEMO_GREETING, None)
    started = {seed: asyncio.Event() for seed in range(3)}

    async def generate(seed: int) -> Any:
        async for item in own_client.stream(prompt, LONG.model_copy(update={"seed": seed})):
            if isinstance(item, tuple):
                if seed in started:
                    started[seed].set()
            else:
                return item
        raise AssertionError("the stream ended without a result")

    before = [asyncio.create_task(generate(seed)) for seed in range(3)]
    # Every one of the first three has produced a token: all are mid-generation now, none still queued.
    await asyncio.gather(*(event.wait() for event in started.values()))
    version = await policy.load_weights(new)
    after = [asyncio.create_task(generate(seed)) for seed in range(3, 6)]
    results = await asyncio.gather(*before, *after)

    assert version == 1 == policy.weights_version
    assert [r.weights_version for r in results] == [0, 0, 0, 1, 1, 1]
    engines = {0: scorer(policy.model, policy.tokenizer, old), 1: scorer(policy.model, policy.tokenizer, new)}
    for result in results:
        own = gap(engines[result.weights_version], prompt, result.completion_ids, result.logprobs)
        other = gap(engines[1 - result.weights_version], prompt, result.completion_ids, result.logprobs)
        assert own < 1e-3, f"version {result.weights_version}: recorded logprobs drift by {own}"
        assert other > 1e-2, "the recorded logprobs must tell the two weight versions apart"


async def test_a_bad_state_dict_is_refused_and_the_engine_keeps_serving(own_client):
    """Missing keys raise; the version stays, and the engine still answers with its old weights."""
    policy = await own_client.policy()
    partial = dict(list(policy.model.state_dict().items())[:2])
    with pytest.raises(RuntimeError, match="Missing key"):
        await policy.load_weights(partial)
    assert policy.weights_version == 0
    done = await own_client.complete(DEMO_GREETING, params=LONG)
    assert done.weights_version == 0 and len(done.completion_token_ids) == LONG.max_tokens


def test_step_metrics_keep_a_known_version_and_leave_out_an_unknown_one():
    """A step from a model that reports no version serialises as before (ATIF has no such key)."""
    from evsys.model.base import Completion
    from evsys.records import StepMetrics

    remote = StepMetrics.from_completion(Completion(text="hi", completion_token_ids=[1, 2]))
    local = StepMetrics.from_completion(Completion(text="hi", completion_token_ids=[1, 2], weights_version=3))
    assert "weights_version" not in remote.model_dump() and remote.weights_version is None
    assert local.model_dump()["weights_version"] == 3
    assert StepMetrics.model_validate_json(local.model_dump_json()).weights_version == 3


async def test_the_trainer_sets_the_version_each_completion_records(own_client):
    """`load_weights(..., version=step)`: later completions record the step; going back is refused."""
    policy = await own_client.policy()
    state = {k: v.clone() for k, v in policy.model.state_dict().items()}
    assert await own_client.load_weights(state, version=7) == 7 == await own_client.weights_version()
    done = await own_client.complete(DEMO_GREETING, params=LONG)
    assert done.weights_version == 7
    with pytest.raises(ValueError, match="older than the loaded 7"):
        await policy.load_weights(state, version=3)
    assert await own_client.load_weights(state) == 8  # no version given: one more
