"""Token ids turned back into text for the trial page's token view (`evsys view --tokenizer PATH`).

Trajectories record token ids only; with a tokenizer (a Hugging Face `tokenizer.json`, or a model directory
holding one) each completion token is decoded on its own, so a person sees the text each id stands for.
Without one the viewer shows the ids.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evsys.records import Trajectory


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
