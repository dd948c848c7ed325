"""TRL's `rollout_func` (EvsysRolloutFunc, over run_rollouts) on a Python task with a respond hook: each
completion holds the model's turns (env_mask 1) and the environment's replies between them (env_mask 0),
with the verifier's reward. Scripted model, no trainer, no sandbox."""

from __future__ import annotations

from types import SimpleNamespace

from author_hooks import ASSISTANT, END, GAME_PROMPT, USER, game_task, guess_by_history, render

from evsys.integrations.trl.rollout import EvsysRolloutFunc
from evsys.testing.scripted_model import ScriptedModelClient

PROMPT = GAME_PROMPT


def _chars(text: str) -> list[int]:
    return [10 + ord(ch) for ch in text]


def test_trl_rollout_func_masks_the_environments_turns(tmp_path):
    task = game_task(max_turns=4)
    client = ScriptedModelClient(guess_by_history, repeat_last=True)
    rollout = EvsysRolloutFunc([task], model=client, jobs_dir=tmp_path, max_retries=0)
    trainer = SimpleNamespace(
        state=SimpleNamespace(global_step=0),
        processing_class=SimpleNamespace(encode=lambda text: [0], eos_token_id=0),
    )
    out = rollout([PROMPT, PROMPT], trainer)
    assert out["evsys_reward"] == [1.0, 1.0]
    reply = [USER, *_chars("higher"), END, ASSISTANT]
    for prompt_ids, completion_ids, mask in zip(
        out["prompt_ids"], out["completion_ids"], out["env_mask"], strict=True
    ):
        assert prompt_ids == render([{"role": "user", "content": PROMPT}])
        assert completion_ids == [*_chars("5"), END, *reply, *_chars("7"), END]
        assert mask == [1, 1, *([0] * len(reply)), 1, 1]
