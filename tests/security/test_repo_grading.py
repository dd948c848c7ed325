"""Repository grading out of the agent's reach: every attack on a repository row's reward, each first shown to
work (a positive control: it scores 1.0 under the in-sandbox grading evsys used before, kept in repo_legacy/),
then shown to score 0.0 under fresh-sandbox grading; plus gold 1.0 / no-op 0.0 controls under both.

One job runs the calc repository's `calc-neg` row (FAIL_TO_PASS test_neg; PASS_TO_PASS test_add, test_mul)
twice: as evsys writes it (graded in a fresh sandbox) and with the old grading (task.toml without
`evsys_repo_grading`, the old tests/test.sh and evsys_grade.py). No attack fixes `neg`.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
from pathlib import Path

import pytest
import repo_attacks
from redteam import noop_exec_request, noop_mode
from repo_legacy import LEGACY_RUNNER, legacy_copy, without_marker

from evsys.engine.config import AgentSpec, JobConfig
from evsys.engine.job import Job
from evsys.repo import fresh as fresh_grading
from evsys.repo.materialise import write_task_dir
from evsys.repo.rows import RepoTask
from evsys.sandbox import LocalSandbox

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "repo"))
from calc_repo import calc_rows, make_calc_repo

pytestmark = [pytest.mark.security, pytest.mark.slow, pytest.mark.timeout(1800)]
AGENTS = [
    "oracle",
    "nop",
    "repo_attacks:ReportUid",
    *(f"repo_attacks:{a.__name__}" for a in repo_attacks.ATTACKS),
]


@pytest.fixture(scope="module")
def noop_switch():
    """The suite's no-op switch (conftest.py) for this module's jobs, which run before the per-test one."""
    with pytest.MonkeyPatch.context() as patch:
        if noop_mode():
            patch.setattr(LocalSandbox, "_exec_request", noop_exec_request)
        yield


@pytest.fixture(scope="module")
def trials(noop_switch, tmp_path_factory):
    """(grading, agent) -> trial, for grading in ("fresh", "legacy")."""
    if shutil.which("buildah") is None or shutil.which("bwrap") is None:
        pytest.skip("image tools missing")
    root = tmp_path_factory.mktemp("repo-attacks")
    row = next(r for r in calc_rows(*make_calc_repo(root)) if r["instance_id"] == "calc-neg")
    fresh = write_task_dir(RepoTask.model_validate(row), root / "fresh" / "calc-neg")
    legacy = legacy_copy(fresh, root / "legacy" / "calc-neg")
    config = JobConfig(
        datasets=[fresh.parent, legacy.parent],
        agents=[AgentSpec(name=name) for name in AGENTS],
        jobs_dir=root / "jobs",
        job_name="attacks",
        n_concurrent=4,
    )
    result = asyncio.run(Job(config).run())
    legacy_dir = str(legacy.parent.resolve())
    out = {
        ("legacy" if str(Path(t.task_path).resolve()).startswith(legacy_dir) else "fresh", t.agent): t
        for t in result.trials
    }
    out["jobs"] = root / "jobs" / "attacks"
    return out


def _rewards(trials, agent: str) -> tuple[float | None, float | None]:
    return trials[("legacy", agent)].reward, trials[("fresh", agent)].reward


@pytest.mark.needs_sandbox
def test_gold_scores_one_and_no_change_zero_under_both(trials):
    assert _rewards(trials, "oracle") == (1.0, 1.0)
    assert _rewards(trials, "nop") == (0.0, 0.0)
    assert trials[("fresh", "oracle")].tests_summary == "1 of 1 FAIL_TO_PASS pass; 2 of 2 PASS_TO_PASS pass"


@pytest.mark.needs_sandbox
@pytest.mark.parametrize("attack", [a.__name__ for a in repo_attacks.ATTACKS])
def test_an_attack_that_wins_under_in_sandbox_grading_scores_zero_in_a_fresh_sandbox(trials, attack):
    agent = f"repo_attacks:{attack}"
    legacy, fresh = trials[("legacy", agent)], trials[("fresh", agent)]
    assert legacy.failure is None and legacy.reward == 1.0, (
        legacy.failure,
        legacy.agent_metadata,
    )  # it works
    assert fresh.failure is None, fresh.failure
    assert fresh.reward == 0.0, fresh.tests_summary
    assert "tests/test_calc.py::test_neg" in fresh.tests_summary  # the unfixed neg() really failed


@pytest.fixture(scope="module")
def exported(noop_switch, tmp_path_factory):
    """agent -> trial of `calc-neg` exported (`evsys tasks export`) and graded by its own tests/test.sh in the
    agent's sandbox, as Harbor runs it."""
    if shutil.which("buildah") is None or shutil.which("bwrap") is None:
        pytest.skip("image tools missing")
    root = tmp_path_factory.mktemp("repo-export")
    row = next(r for r in calc_rows(*make_calc_repo(root)) if r["instance_id"] == "calc-neg")
    task_dir = without_marker(
        write_task_dir(RepoTask.model_validate(row), root / "out" / "calc-neg", with_repo=True)
    )
    agents = [
        "oracle",
        "nop",
        *(f"repo_attacks:{a.__name__}" for a in repo_attacks.STOPPED_BY_EXPORTED_TEST_SH),
    ]
    config = JobConfig(
        datasets=[task_dir],
        agents=[AgentSpec(name=name) for name in agents],
        jobs_dir=root / "jobs",
        n_concurrent=4,
    )
    return {t.agent: t for t in asyncio.run(Job(config).run()).trials}


@pytest.mark.needs_sandbox
def test_an_exported_directorys_own_test_sh_grades_gold_one_and_no_change_zero(exported):
    assert (exported["oracle"].reward, exported["nop"].reward) == (1.0, 0.0)


@pytest.mark.needs_sandbox
@pytest.mark.parametrize("attack", [a.__name__ for a in repo_attacks.STOPPED_BY_EXPORTED_TEST_SH])
def test_an_exported_directorys_own_test_sh_stops_log_xfail_git_and_history_attacks(trials, exported, attack):
    legacy_attack = attack.removesuffix("AsRoot")
    assert trials[("legacy", f"repo_attacks:{legacy_attack}")].reward == 1.0  # the attack works (as agent)
    trial = exported[f"repo_attacks:{attack}"]
    assert trial.failure is None and trial.agent_metadata["exit"] == 0, trial.agent_metadata
    assert trial.reward == 0.0, trial.tests_summary


@pytest.mark.needs_sandbox
def test_the_code_under_test_runs_as_root_no_more(trials):
    def uids(grading: str, log: str) -> set[str]:
        trial = trials[(grading, "repo_attacks:ReportUid")]
        text = (trials["jobs"] / trial.trial_name / "verifier" / log).read_text()
        return {line.split("=", 1)[1] for line in text.splitlines() if line.startswith("EVSYS_UID=")}

    assert uids("legacy", "test_output.txt") == {"0"}  # before: imported by the grader as root
    fresh = uids("fresh", "test_output.txt")
    assert fresh and "0" not in fresh


def _calc_neg_job(root: Path, agents: list[str], name: str) -> dict:
    """agent -> trial of `calc-neg` graded in a fresh sandbox (by whatever runner evsys.repo.fresh places)."""
    row = next(r for r in calc_rows(*make_calc_repo(root)) if r["instance_id"] == "calc-neg")
    task_dir = write_task_dir(RepoTask.model_validate(row), root / "rows" / "calc-neg")
    config = JobConfig(
        datasets=[task_dir],
        agents=[AgentSpec(name=agent) for agent in agents],
        jobs_dir=root / "jobs",
        job_name=name,
        n_concurrent=4,
    )
    return {t.agent: t for t in asyncio.run(Job(config).run()).trials}


IN_PROCESS = ["oracle", "nop", *(f"repo_attacks:{a.__name__}" for a in repo_attacks.IN_PROCESS_ATTACKS)]


@pytest.fixture(scope="module")
def in_process(noop_switch, tmp_path_factory):
    """grading -> agent -> trial: each in-process attack graded in a fresh sandbox by the runner before
    hardening ("before", repo_legacy/runner_v1.py) and by today's ("hardened")."""
    if shutil.which("buildah") is None or shutil.which("bwrap") is None:
        pytest.skip("image tools missing")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fresh_grading, "RUNNER", LEGACY_RUNNER)
        before = _calc_neg_job(tmp_path_factory.mktemp("before"), IN_PROCESS, "before")
    hardened = _calc_neg_job(tmp_path_factory.mktemp("hardened"), IN_PROCESS, "hardened")
    return {"before": before, "hardened": hardened}


def test_gold_scores_one_with_no_findings_and_no_change_zero_under_the_hardened_runner(in_process):
    gold, nop = in_process["hardened"]["oracle"], in_process["hardened"]["nop"]
    assert (gold.reward, gold.integrity) == (1.0, []), (gold.tests_summary, gold.integrity)
    assert (nop.reward, nop.integrity) == (0.0, [])
    assert (in_process["before"]["oracle"].reward, in_process["before"]["nop"].reward) == (1.0, 0.0)


@pytest.mark.parametrize("attack", [a.__name__ for a in repo_attacks.IN_PROCESS_ATTACKS])
def test_an_attack_from_inside_pytest_wins_before_hardening_and_scores_zero_with_findings(in_process, attack):
    agent = f"repo_attacks:{attack}"
    before, after = in_process["before"][agent], in_process["hardened"][agent]
    assert before.failure is None and before.reward == 1.0, (before.tests_summary, before.agent_metadata)
    assert after.failure is None and after.reward == 0.0, after.tests_summary
    kinds = {finding.kind.value for finding in after.integrity}
    assert kinds & {"audit_refused", "run_void", "canary_failed", "always_equal"}, after.integrity
    assert all(finding.source == "repo.runner" for finding in after.integrity)
    assert "tests/test_calc.py::test_neg" in after.tests_summary  # the unfixed neg() did not pass


def test_files_the_change_filter_dropped_are_findings(trials):
    trial = trials[("fresh", "repo_attacks:ConftestHookwrapper")]
    assert trial.reward == 0.0
    assert [(f.kind.value, f.source) for f in trial.integrity] == [("change_dropped", "repo.change")]
    assert trial.integrity[0].evidence.startswith("conftest.py: ")
