"""Exports of a job directory for trainers: RL rows (JSONL / Parquet / `datasets`), SFT chats, ATIF copies,
and the capture graph's training sequences (evsys's `sequences` rows, OpenEnv `TrainingTrace` documents).

The schema is documented in docs/rl.md ("Export schema"). Every sample of every task is one RL row, errored
ones included with their `error` set (a trainer filters them; nothing disappears silently). Every row of every
format carries the trial's integrity findings (`integrity`, `integrity_kinds`, `screened`); rewards and
advantages follow the export's integrity policy (evsys.trajectory.integrity, default `zero`). Files are
written atomically.
"""

from __future__ import annotations

import importlib
import io
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from evsys.records import (
    AdvantageMethod,
    IntegrityPolicy,
    RolloutTrajectory,
    Trajectory,
    TrajectoryGroup,
    TrialResult,
)
from evsys.trajectory.groups import finalize_group, integrity_columns, rollout_from_trial
from evsys.util.atomic import write_bytes_atomic, write_text_atomic

ExportFormat = Literal["rl", "sft", "atif", "parquet", "sequences", "openenv"]
EXPORT_FORMATS: tuple[ExportFormat, ...] = get_args(ExportFormat)
RL_COLUMNS = (
    "group_id",
    "task_id",
    "trial_name",
    "attempt",
    "prompt_token_ids",
    "completion_token_ids",
    "loss_mask",
    "logprobs",
    "reward",
    "rewards",
    "advantage",
    "prefix_break",
    "weights_version",
    "error",
    "integrity",
    "integrity_kinds",
    "screened",
)


class ExportError(ValueError):
    """The job directory cannot be exported (missing, no trials); the message names the path."""


def _trial_dirs(job_dir: Path) -> list[Path]:
    if not (job_dir / "config.json").is_file():
        raise ExportError(f"{job_dir} is not a job directory (no config.json)")
    return sorted(p for p in job_dir.iterdir() if (p / "result.json").is_file() and p.is_dir())


def _read_trajectory(path: Path) -> Trajectory | None:
    try:
        return Trajectory.model_validate_json(path.read_bytes())
    except (OSError, ValueError):
        return None


def load_job_groups(
    job_dir: Path | str,
    method: AdvantageMethod = "mean",
    integrity: IntegrityPolicy | str = IntegrityPolicy.ZERO,
) -> list[TrajectoryGroup]:
    """Every finished trial of a job, grouped per (dataset, task, and for served episodes their client's
    group) in that order, with advantages (rewards under the `integrity` policy)."""
    job_dir = Path(job_dir)
    groups: dict[tuple[str, str, str], TrajectoryGroup] = {}
    for trial_dir in _trial_dirs(job_dir):
        try:
            result = TrialResult.model_validate_json((trial_dir / "result.json").read_bytes())
        except ValueError as exc:
            raise ExportError(f"{trial_dir / 'result.json'}: unreadable: {exc}") from None
        key = (result.dataset, result.task_name, result.group or "")
        if key not in groups:
            group_id = f"{job_dir.name}/{result.task_name}" + (f"/{result.group}" if result.group else "")
            groups[key] = TrajectoryGroup(group_id=group_id, task_id=result.task_name)
        trajectory = _read_trajectory(trial_dir / "trajectory.json")
        rollout = rollout_from_trial(result, trajectory, result.task_name, integrity)
        groups[key].trajectories.append(rollout)
        if trajectory is not None and not groups[key].prompt:
            groups[key].prompt = _first_user_message(trajectory)
    ordered = [groups[key] for key in sorted(groups)]
    for group in ordered:
        group.trajectories.sort(key=lambda t: (t.attempt, t.trial_name))
        finalize_group(group, method)
    return ordered


def _first_user_message(trajectory: Trajectory) -> str:
    return next((s.message for s in trajectory.steps if s.source == "user"), "")


def rl_rows(groups: Iterable[TrajectoryGroup]) -> list[dict[str, Any]]:
    """One RL row per sample (columns: RL_COLUMNS; `rewards` every reward key of the trial, e.g. a rubric's
    parts, as the integrity policy left them; `error` is "<cause>: <message>" or None; `integrity` the
    findings as {kind, evidence, source})."""
    rows = []
    for group in groups:
        for sample in group.trajectories:
            rows.append(_rl_row(group, sample))
    return rows


def _rl_row(group: TrajectoryGroup, sample: RolloutTrajectory) -> dict[str, Any]:
    error = f"{sample.error.cause}: {sample.error.message}" if sample.error else None
    return {
        "group_id": group.group_id,
        "task_id": sample.task_id,
        "trial_name": sample.trial_name,
        "attempt": sample.attempt,
        "prompt_token_ids": sample.prompt_token_ids,
        "completion_token_ids": sample.completion_token_ids,
        "loss_mask": sample.loss_mask,
        "logprobs": sample.logprobs,
        "reward": sample.reward,
        "rewards": dict(sample.rewards),
        "advantage": sample.advantage,
        "prefix_break": sample.prefix_break,
        "weights_version": sample.weights_version,
        "error": error,
        **integrity_columns(sample),
    }


def _rewards_type(pa: Any, rows: list[dict[str, Any]]) -> Any:
    """The `rewards` column's type: a struct of every reward key the rows hold (sorted), each a nullable
    float (a row without a key has null there); `reward` alone when no row has any."""
    keys = sorted({key for row in rows for key in row["rewards"]}) or ["reward"]
    return pa.struct([(key, pa.float64()) for key in keys])


def rl_table(rows: list[dict[str, Any]]) -> Any:
    """The RL rows as a `pyarrow.Table` with a fixed schema (so empty token lists keep their types); the
    `rewards` struct has one field per reward key of the job."""
    pa = _require("pyarrow")
    schema = pa.schema(
        [
            ("group_id", pa.string()),
            ("task_id", pa.string()),
            ("trial_name", pa.string()),
            ("attempt", pa.int64()),
            ("prompt_token_ids", pa.list_(pa.int64())),
            ("completion_token_ids", pa.list_(pa.int64())),
            ("loss_mask", pa.list_(pa.int8())),
            ("logprobs", pa.list_(pa.float64())),
            ("reward", pa.float64()),
            ("rewards", _rewards_type(pa, rows)),
            ("advantage", pa.float64()),
            ("prefix_break", pa.bool_()),
            ("weights_version", pa.int64()),
            ("error", pa.string()),
            ("integrity", pa.list_(pa.struct([(k, pa.string()) for k in ("kind", "evidence", "source")]))),
            ("integrity_kinds", pa.list_(pa.string())),
            ("screened", pa.bool_()),
        ]
    )
    return pa.Table.from_pylist(rows, schema=schema)


def _require(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(f"this export needs the `{module}` package: pip install 'evsys[rl]'") from None


def sft_messages(trajectory: Trajectory) -> list[dict[str, Any]]:
    """The trajectory as OpenAI-style chat messages (assistant tool calls, then one tool message each)."""
    messages: list[dict[str, Any]] = []
    for step in trajectory.steps:
        if step.source != "agent":
            messages.append({"role": step.source, "content": step.message})
            continue
        message: dict[str, Any] = {"role": "assistant", "content": step.message}
        if step.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.tool_call_id,
                    "type": "function",
                    "function": {"name": call.function_name, "arguments": json.dumps(call.arguments)},
                }
                for call in step.tool_calls
            ]
        messages.append(message)
        for result in step.observation.results if step.observation else []:
            content = result.content if isinstance(result.content, str) else json.dumps(result.content)
            messages.append({"role": "tool", "tool_call_id": result.source_call_id, "content": content})
    return messages


def sft_rows(
    groups: Iterable[TrajectoryGroup], *, successful_only: bool = False, min_reward: float = 1.0
) -> list[dict[str, Any]]:
    """One SFT row per sample with a trajectory: messages, tool definitions, reward, ids.

    `successful_only` keeps samples without an error or screening whose reward is at least `min_reward`
    (under the default integrity policy a trial with findings has reward 0). A sample with no
    assistant message holding text or tool calls (the oracle's, a model that said nothing) is left out: it has
    nothing to learn from.
    """
    rows = []
    for group in groups:
        for sample in group.trajectories:
            if sample.trajectory is None or not sample.trajectory.steps:
                continue
            if successful_only and (not sample.ok or sample.screened or sample.reward < min_reward):
                continue
            messages = sft_messages(sample.trajectory)
            if not any(_teaches(m) for m in messages):  # e.g. the oracle: no model turn to learn from
                continue
            rows.append(
                {
                    "group_id": group.group_id,
                    "task_id": sample.task_id,
                    "trial_name": sample.trial_name,
                    "messages": messages,
                    "tools": sample.trajectory.agent.tool_definitions or [],
                    "reward": sample.reward,
                    "rewards": dict(sample.rewards),
                    **integrity_columns(sample),
                }
            )
    return rows


def _teaches(message: dict[str, Any]) -> bool:
    """True for an assistant message with text or tool calls."""
    content = message.get("content")
    return message.get("role") == "assistant" and bool(
        (isinstance(content, str) and content.strip())
        or (content and not isinstance(content, str))
        or message.get("tool_calls")
    )


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    write_text_atomic(path, text)
    return path


def _write_parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    parquet = _require("pyarrow.parquet")
    buffer = io.BytesIO()
    parquet.write_table(rl_table(rows), buffer)
    write_bytes_atomic(path, buffer.getvalue())
    return path


def _atif_copy(trial_dir: Path) -> bytes:
    """The trial's trajectory.json with its integrity findings in the top-level `extra.integrity` (a list of
    {kind, evidence, source}); the bytes as they are when either file cannot be read."""
    raw = (trial_dir / "trajectory.json").read_bytes()
    try:
        data = json.loads(raw)
        result = TrialResult.model_validate_json((trial_dir / "result.json").read_bytes())
    except (OSError, ValueError):
        return raw
    if not isinstance(data, dict) or not isinstance(data.get("extra", {}), dict):
        return raw
    findings = [finding.model_dump(mode="json") for finding in result.integrity]
    data["extra"] = {**data.get("extra", {}), "integrity": findings}
    return json.dumps(data, ensure_ascii=False, indent=2).encode()


def atif_dir(out_dir: Path) -> Path:
    """Where the ATIF copies go: OUT/atif/, or OUT itself when it is named atif (`-o out/atif`)."""
    return out_dir if out_dir.name == "atif" else out_dir / "atif"


def _write_atif(job_dir: Path, out_dir: Path) -> list[Path]:
    """One ATIF copy per trial with a trajectory, in `atif_dir(out_dir)`."""
    written = []
    target_dir = atif_dir(out_dir)
    target_dir.mkdir(parents=True, exist_ok=True)
    for trial_dir in _trial_dirs(job_dir):
        if (trial_dir / "trajectory.json").is_file():
            target = target_dir / f"{trial_dir.name}.json"
            write_bytes_atomic(target, _atif_copy(trial_dir))
            written.append(target)
    return written


@dataclass
class ExportReport:
    """What an export wrote: its files, how many rows (for `atif`, trajectory copies) they hold out of how
    many finished trials, and why there are none when there are none."""

    files: list[Path]
    rows: int
    trials: int
    why_empty: str | None = None
    location: Path | None = None  # the one file written, or the directory of the ATIF copies


def export_job(job_dir: Path | str, fmt: ExportFormat, out_dir: Path | str, **options: Any) -> list[Path]:
    """The files `export_job_report(job_dir, fmt, out_dir, **options)` wrote."""
    return export_job_report(job_dir, fmt, out_dir, **options).files


def export_job_report(
    job_dir: Path | str,
    fmt: ExportFormat,
    out_dir: Path | str,
    *,
    successful_only: bool = False,
    advantage: AdvantageMethod = "mean",
    integrity: IntegrityPolicy | str = IntegrityPolicy.ZERO,
) -> ExportReport:
    """Export a job directory: `rl` -> rl.jsonl, `parquet` -> rl.parquet, `sft` -> sft.jsonl, `atif` -> atif/
    (OUT itself when named atif), `sequences` -> sequences.jsonl (one row per training sequence), `openenv` ->
    openenv.jsonl (one OpenEnv `TrainingTrace` per sample).

    Rewards and advantages follow the `integrity` policy (zero | screen | flag). Returns what was written:
    the files, their rows and, for none, why. Raises ExportError for a directory that is not a job.
    """
    job_dir, out_dir = Path(job_dir), Path(out_dir)
    if fmt not in EXPORT_FORMATS:
        raise ExportError(f"unknown export format {fmt!r}; choose one of {', '.join(EXPORT_FORMATS)}")
    _make_out_dir(out_dir)
    if fmt == "atif":
        copies = _write_atif(job_dir, out_dir)
        report = _report(copies, len(copies), len(_trial_dirs(job_dir)), fmt, successful_only)
        report.location = atif_dir(out_dir)
        return report
    groups = load_job_groups(job_dir, advantage, integrity)
    trials = sum(len(group.trajectories) for group in groups)
    rows = _rows_of(fmt, groups, successful_only)
    if fmt == "parquet":
        written = _write_parquet(out_dir / "rl.parquet", rows)
    else:
        written = _write_jsonl(out_dir / f"{fmt}.jsonl", rows)
    return _report([written], len(rows), trials, fmt, successful_only)


def _make_out_dir(out_dir: Path) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise ExportError(f"{out_dir} is a file: -o names the directory the export writes its files into")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ExportError(f"cannot create the output directory {out_dir}: {exc.strerror or exc}") from None


def _rows_of(fmt: ExportFormat, groups: list[TrajectoryGroup], successful_only: bool) -> list[dict[str, Any]]:
    """The rows of a row format (every format but `atif`)."""
    if fmt == "sft":
        return sft_rows(groups, successful_only=successful_only)
    if fmt in ("sequences", "openenv"):
        from evsys.trajectory.training_rows import openenv_traces, sequence_rows

        return (sequence_rows if fmt == "sequences" else openenv_traces)(groups)
    return rl_rows(groups)


_WHY_EMPTY: dict[str, str] = {
    "sft": "no trial has a model turn with text or tool calls to learn from (e.g. only oracle/nop trials)",
    "sequences": "no trial recorded token ids (an agent without a model, or a provider that returns none)",
    "openenv": "no trial recorded a model call with token ids",
    "atif": "no trial has a trajectory.json",
}


def _report(files: list[Path], rows: int, trials: int, fmt: str, successful_only: bool) -> ExportReport:
    """The export's report; for no rows, the reason (no finished trial, the filter, the format's need)."""
    why = None
    if rows == 0:
        if trials == 0:
            why = "the job has no finished trial (no result.json)"
        elif fmt == "sft" and successful_only:
            why = "--successful-only: no trial ended without an error and with reward >= 1"
        else:
            why = _WHY_EMPTY.get(fmt, "no trial left a row")
    location = files[0] if len(files) == 1 else None
    return ExportReport(files=files, rows=rows, trials=trials, why_empty=why, location=location)


def to_hf_dataset(
    job_dir: Path | str,
    advantage: AdvantageMethod = "mean",
    integrity: IntegrityPolicy | str = IntegrityPolicy.ZERO,
) -> Any:
    """The job's RL rows as a `datasets.Dataset` (same columns and types as the Parquet export)."""
    datasets = _require("datasets")
    return datasets.Dataset(rl_table(rl_rows(load_job_groups(job_dir, advantage, integrity))))
