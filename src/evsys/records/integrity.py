"""What a trial tried against its grader: `IntegrityFinding`s on every trial (`TrialResult.integrity`).

A finding is evidence, not a verdict: its `kind` names what was seen (one of `IntegrityKind`), `evidence` says
what exactly (a path, an audit event, a canary's id, a kernel counter), and `source` says which part of evsys
saw it. A trial with no findings has an empty list. What a trainer does with findings is its choice
(`IntegrityPolicy`): zero the reward, screen the sample out of its group's advantages, or only record it.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field, field_serializer

from evsys.util.text import safe_text

MAX_EVIDENCE_CHARS = 2000


class IntegrityKind(StrEnum):
    """What was seen. New kinds may be added; readers keep unknown ones as they are."""

    # the agent's change touched what grading owns (repository rows: test files, conftest.py, .pth, ...)
    CHANGE_DROPPED = "change_dropped"
    # the agent wrote to, or linked into, a place the verifier owns (/logs/verifier, /tests, reward files)
    VERIFIER_PLACE_WRITTEN = "verifier_place_written"
    # the agent left a preload for the verifier's processes (/etc/ld.so.preload, LD_* variables)
    PRELOAD_PLANTED = "preload_planted"
    # the grading runner refused what forging needs (an audit event: ctypes, gc walks, /proc/self/mem, ...)
    AUDIT_REFUSED = "audit_refused"
    # a canary test came out other than it must: the run's outcomes cannot be trusted
    CANARY_FAILED = "canary_failed"
    # the grading run did not finish normally (an early exit, a second report, a killed runner)
    RUN_VOID = "run_void"
    # an assertion operand from the agent's code compared equal to a fresh sentinel object
    ALWAYS_EQUAL = "always_equal"
    # the agent's own sandbox hit its limits (memory, pids, tmpfs) and that failed the trial
    AGENT_EXHAUSTED_RESOURCES = "agent_exhausted_resources"
    # anything else a source reports
    OTHER = "other"


class IntegrityPolicy(StrEnum):
    """What a trainer does with a trial that has findings."""

    ZERO = "zero"  # the reward becomes 0 (the default)
    SCREEN = "screen"  # the sample is marked and left out of its group's advantages
    FLAG = "flag"  # recorded only


class IntegrityFinding(BaseModel):
    """One thing a trial tried against its grader, with the evidence and the part of evsys that saw it."""

    kind: IntegrityKind
    evidence: str = Field(description="What exactly was seen: a path, an event, a test id, a counter.")
    source: str = Field(
        "", description="Which part of evsys saw it, e.g. 'repo.runner', 'verifier', 'sandbox'."
    )

    @field_serializer("evidence")
    def _safe_evidence(self, value: str) -> str:
        return safe_text(value[:MAX_EVIDENCE_CHARS])  # evidence quotes what the sandbox named
