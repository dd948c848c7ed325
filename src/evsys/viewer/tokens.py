"""Token ids turned back into text for the trial page's token view (`evsys view --tokenizer PATH`).

Trajectories record token ids only; with a tokenizer (a Hugging Face `tokenizer.json`, or a model directory
holding one) each completion token is decoded on its own, so a person sees the text each id stands for.
Without `--tokenizer`, a trial of the local engine (`local`, `local:<dir or .gguf>`) is decoded with its
model's own tokenizer when that model is on this machine (`TokenizerFinder`); otherwise the viewer shows ids.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evsys.model.local.loader import existing_model_dir
from evsys.records import Trajectory

LOCAL_PROVIDER = "local"


class TokenizerError(ValueError):
    """The tokenizer file is missing or cannot be loaded (the message names the path)."""


class TokenDecoder:
    """Decodes token ids one by one with a `tokenizers` tokenizer."""

    def __init__(self, path: Path) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:  # pragma: no cover - depends on the installed extras
            raise TokenizerError("decoding tokens needs 'tokenizers' (the 'local' extra)") from exc
        path = Path(path)
        file = path / "tokenizer.json" if path.is_dir() else path
        if not file.is_file():
            raise TokenizerError(f"{file} does not exist (give a tokenizer.json or a model directory)")
        try:
            self._tokenizer: Any = Tokenizer.from_file(str(file))
        except Exception as exc:  # tokenizers raises its own Exception type for unreadable files
            raise TokenizerError(f"{file}: not a tokenizer.json ({exc})") from None
        self.path = file

    def decode_each(self, ids: list[int]) -> list[str]:
        """The text of each token on its own (an id the vocabulary lacks shows as `<id>`)."""
        out = []
        for token_id in ids:
            try:
                out.append(self._tokenizer.decode([token_id], skip_special_tokens=False))
            except (OverflowError, TypeError, ValueError):
                out.append(f"<{token_id}>")
        return out

    def completion_texts(self, trajectory: Trajectory | None) -> dict[int, list[str]]:
        """Per step id, the decoded text of each completion token."""
        if trajectory is None:
            return {}
        texts = {}
        for step in trajectory.steps:
            if step.metrics is not None and step.metrics.completion_token_ids:
                texts[step.step_id] = self.decode_each(step.metrics.completion_token_ids)
        return texts


class TokenizerFinder:
    """The decoder for a trial: the one given (`--tokenizer`) for every trial, else, when `find_local`, the
    tokenizer of the trial's local model (found once per model directory; None when there is none)."""

    def __init__(self, given: TokenDecoder | None = None, *, find_local: bool = False) -> None:
        self.given = given
        self.find_local = find_local
        self._found: dict[Path, TokenDecoder | None] = {}

    def decoder_for(self, model: str | None) -> TokenDecoder | None:
        """The decoder for a trial whose model string is `model` (e.g. `local`, `local:/models/qwen`)."""
        if self.given is not None or not self.find_local or not model:
            return self.given
        provider, _, name = model.partition(":")
        if provider != LOCAL_PROVIDER:
            return None
        model_dir = existing_model_dir(name)
        if model_dir is None:
            return None
        if model_dir not in self._found:
            try:
                self._found[model_dir] = TokenDecoder(model_dir)
            except TokenizerError:
                self._found[model_dir] = None
        return self._found[model_dir]
