"""A tiny Qwen2-architecture chat model with a byte-level BPE tokenizer, built offline in seconds.

`build_tiny_model(recipe)` trains the tokenizer with `tokenizers` on a corpus made from the recipe,
initialises a small Qwen2 model from a fixed seed, optionally trains it on scripted chats (loss on the
assistant's final turn only) until it reproduces them greedily, and saves everything as a Hugging Face
directory under `$EVSYS_CACHE_DIR/tiny-models/<recipe-hash>/`. The same recipe always yields the same
directory, so tests and benches share one build. The chat template is evsys's Hermes/ChatML template, so tool
calls work."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from evsys.model.local.loader import cache_dir
from evsys.model.render import HERMES_CHATML_TEMPLATE

RECIPE_FILE = "evsys-recipe.json"
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
FILLER_TEXT = [
    "The quick brown fox jumps over the lazy dog.",
    "Create the file, write the text, then check the result with cat and ls -la.",
    "def main():\n    print('hello world')\n    return 0\n",
    '{"name": "bash", "arguments": {"command": "echo ok"}}',
    "Error: command not found. Exit code 1. Permission denied.",
    "Numbers 0 1 2 3 4 5 6 7 8 9 10 100 1000; symbols !@#$%^&*()[]{}<>/\\|-_=+~`'\".,;:?",
]


class TrainingChat(BaseModel):
    """One scripted chat: the model learns to produce the last message (an assistant turn) given the rest."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None


class TinyModelRecipe(BaseModel):
    """Everything that determines the tiny model; its hash names the cache directory."""

    model_config = ConfigDict(extra="forbid")

    seed: int = 0
    vocab_size: int = 1024
    hidden_size: int = 64
    intermediate_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    context_window: int = 1024
    stdlib_corpus_kb: int = Field(
        0,
        ge=0,
        description="Also train the tokenizer on this many KB of the Python standard library's sources "
        "(English prose and code): long prompts such as a harness's system prompt take fewer tokens.",
    )
    chats: list[TrainingChat] = Field(default_factory=list)
    train_steps: int = 300
    learning_rate: float = 3e-3
    min_target_prob: float | None = Field(
        None,
        gt=0.0,
        lt=1.0,
        description="Also train until every scripted token has at least this probability, so that sampling "
        "at temperature 1 (what harnesses like Claude Code use) replays the script too, not only greedy "
        "decoding. None: the argmax is enough.",
    )
    version: int = Field(4, description="Bumped when the build procedure changes.")

    def key(self) -> str:
        """A stable hash of the recipe (and of the Python version when the stdlib is part of the corpus)."""
        text = self.model_dump_json(exclude={"min_target_prob"} if self.min_target_prob is None else None)
        if self.stdlib_corpus_kb:
            text += f"|python{sys.version_info[0]}.{sys.version_info[1]}"
        return hashlib.sha256(text.encode()).hexdigest()[:16]


# A demo recipe shared by tests and benches: one tool-calling chat and one plain chat.
DEMO_BASH_TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command and return its output.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "The command line."}},
            "required": ["command"],
        },
    },
}
DEMO_LIST_FILES = [{"role": "user", "content": "List the files in the current directory."}]
DEMO_LIST_FILES_REPLY = {
    "role": "assistant",
    "content": "",
    "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    ],
}
DEMO_GREETING = [{"role": "user", "content": "Say hello."}]
DEMO_GREETING_REPLY = {"role": "assistant", "content": "Hello! How can I help you today?"}

DEMO_RECIPE = TinyModelRecipe(
    chats=[
        TrainingChat(messages=[*DEMO_LIST_FILES, DEMO_LIST_FILES_REPLY], tools=[DEMO_BASH_TOOL]),
        TrainingChat(messages=[*DEMO_GREETING, DEMO_GREETING_REPLY]),
    ],
    train_steps=300,
)


def build_tiny_model(recipe: TinyModelRecipe | None = None, root: Path | None = None) -> Path:
    """Build (or reuse) the model for `recipe` and return its HF directory."""
    recipe = recipe or TinyModelRecipe()
    target = (root or cache_dir() / "tiny-models") / recipe.key()
    if (target / RECIPE_FILE).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        from transformers import AutoTokenizer

        built = _build_tokenizer(recipe)
        built.save_pretrained(tmp)
        model = _build_model(recipe, built)
        model.config.save_pretrained(tmp)
        # Train with exactly the tokenizer inference will load: with config.json present, transformers picks
        # the architecture's tokenizer class, whose pre-tokenisation can differ from the generic one.
        tokenizer = AutoTokenizer.from_pretrained(tmp)
        if recipe.chats and recipe.train_steps:
            _train(model, tokenizer, recipe)
        model.save_pretrained(tmp)
        (tmp / RECIPE_FILE).write_text(recipe.model_dump_json(indent=2) + "\n")
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / RECIPE_FILE).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _render(tokenizer: Any, chat: TrainingChat, *, prompt_only: bool) -> str:
    messages = chat.messages[:-1] if prompt_only else chat.messages
    return tokenizer.apply_chat_template(
        messages,
        tools=chat.tools,
        chat_template=HERMES_CHATML_TEMPLATE,
        add_generation_prompt=prompt_only,
        tokenize=False,
    )


def _build_tokenizer(recipe: TinyModelRecipe) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    class _Renderer:
        """Just enough of a tokenizer to render chats with the template before the real one exists."""

        def apply_chat_template(self, *args: Any, **kwargs: Any) -> str:
            bootstrap = PreTrainedTokenizerFast(tokenizer_object=_empty_tokenizer())
            text = bootstrap.apply_chat_template(*args, **kwargs)
            assert isinstance(text, str), "chats are rendered with tokenize=False"
            return text

    renderer = _Renderer()
    corpus = list(FILLER_TEXT)
    for chat in recipe.chats:
        corpus.append(_render(renderer, chat, prompt_only=False))
    corpus.append(
        _render(renderer, TrainingChat(messages=[{"role": "user", "content": "hi"}]), prompt_only=False)
    )
    corpus += _stdlib_corpus(recipe.stdlib_corpus_kb * 1024)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=recipe.vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # one thread: the same merges every build
    bpe.train_from_iterator(corpus, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>", model_max_length=10**6
    )
    tokenizer.chat_template = HERMES_CHATML_TEMPLATE
    return tokenizer


def _stdlib_corpus(limit: int) -> list[str]:
    """Up to `limit` bytes of the standard library's .py files, in a fixed order (same merges every build)."""
    import sysconfig

    texts: list[str] = []
    total = 0
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        if total >= limit:
            break
        text = path.read_text("utf-8", "replace")[: limit - total]
        texts.append(text)
        total += len(text)
    return texts


def _empty_tokenizer() -> Any:
    from tokenizers import Tokenizer, models

    return Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>"))


def _build_model(recipe: TinyModelRecipe, tokenizer: Any) -> Any:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=recipe.hidden_size,
        intermediate_size=recipe.intermediate_size,
        num_hidden_layers=recipe.num_layers,
        num_attention_heads=recipe.num_heads,
        num_key_value_heads=recipe.num_kv_heads,
        max_position_embeddings=recipe.context_window,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=eos,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(recipe.seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = eos
    return model


def _train(model: Any, tokenizer: Any, recipe: TinyModelRecipe) -> None:
    """Teach the model the scripted assistant turns (loss on those tokens only), full batch, AdamW.

    Trains `train_steps` steps, then keeps going in chunks of `train_steps // 2` (up to 4x in all) until every
    target token is the model's argmax under teacher forcing (and, with `min_target_prob`, that likely), which
    makes greedy decoding (or sampling) replay the script.
    """
    import torch

    ids, labels, mask = _training_batch(tokenizer, recipe)
    torch.manual_seed(recipe.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.learning_rate)
    steps, chunk = 0, recipe.train_steps
    while True:
        model.train()
        for _ in range(chunk):
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        steps += chunk
        model.eval()
        wrong = _wrong_rows(model, ids, labels, mask, recipe.min_target_prob)
        if not wrong:
            return
        if steps >= 4 * recipe.train_steps:
            raise RuntimeError(f"tiny model did not learn scripted chats {wrong} in {steps} steps")
        chunk = max(recipe.train_steps // 2, 1)


def _training_batch(tokenizer: Any, recipe: TinyModelRecipe) -> tuple[Any, Any, Any]:
    import torch

    examples = []
    for chat in recipe.chats:
        prompt = tokenizer(_render(tokenizer, chat, prompt_only=True), add_special_tokens=False)["input_ids"]
        full = tokenizer(_render(tokenizer, chat, prompt_only=False), add_special_tokens=False)["input_ids"]
        full = full[: full.index(tokenizer.eos_token_id, len(prompt)) + 1]  # up to the turn's <|im_end|>
        examples.append((full, len(prompt)))
    width = max(len(full) for full, _ in examples)
    ids = torch.full((len(examples), width), tokenizer.pad_token_id)
    labels = torch.full((len(examples), width), -100)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for row, (full, start) in enumerate(examples):
        ids[row, : len(full)] = torch.tensor(full)
        labels[row, start : len(full)] = torch.tensor(full[start:])
        mask[row, : len(full)] = 1
    return ids, labels, mask


def _wrong_rows(model: Any, ids: Any, labels: Any, mask: Any, min_prob: float | None = None) -> list[int]:
    """Rows where some target token is not the argmax of the model's prediction for it (or, with `min_prob`,
    has a lower probability than that)."""
    import torch

    with torch.inference_mode():
        logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
    targets = labels[:, 1:]
    bad = (targets != -100) & (logits.argmax(-1) != targets)
    if min_prob is not None:
        probs = logits.float().softmax(-1).gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
        bad |= (targets != -100) & (probs < min_prob)
    return [int(row) for row in bad.any(dim=1).nonzero().flatten()]


def recipe_summary(path: Path) -> dict[str, Any]:
    """The recipe a built model directory was made from."""
    return json.loads((path / RECIPE_FILE).read_text())


# An untrained model with a long context and a tokenizer that also learned from the standard library:
# real harnesses (Claude Code, Codex) send system prompts of tens of thousands of characters.
LONG_CONTEXT_RECIPE = TinyModelRecipe(context_window=131072, vocab_size=8192, stdlib_corpus_kb=3000)
