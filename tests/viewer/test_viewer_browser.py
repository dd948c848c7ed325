"""The viewer in a real headless browser (Debian's chromium via Playwright) against `evsys view`."""

from __future__ import annotations

import json
import shutil

import pytest
from viewer_jobs import COMPLETION_IDS, FINDING, HOSTILE, make_handmade_job, start_viewer

pytestmark = pytest.mark.slow
expect = pytest.importorskip("playwright.sync_api").expect

WAIT_MS = 30_000  # a guard against a hung page, not a speed assertion


def rows(page, table: str) -> list[str]:
    return page.locator(f"table#{table} tbody tr").all_inner_texts()


def test_job_list_shows_a_finished_job(page, viewer_url, screenshot_dir):
    page.goto(f"{viewer_url}/")
    page.wait_for_selector("table#jobs tbody tr", timeout=WAIT_MS)
    oracle = next(r for r in rows(page, "jobs") if "oracle-job" in r)
    assert "done" in oracle
    assert "1.000" in oracle  # mean reward of the oracle
    assert "oracle" in oracle
    page.screenshot(path=screenshot_dir / "viewer-jobs.png", full_page=True)


def test_filtering_by_cause_leaves_only_the_failed_trials(page, viewer_url, screenshot_dir):
    page.goto(f"{viewer_url}/#/job/handmade")
    page.wait_for_selector("table#trials tbody tr", timeout=WAIT_MS)
    assert len(rows(page, "trials")) == 4
    page.select_option("#f-cause", "failed")
    failed = rows(page, "trials")
    assert len(failed) == 3
    assert all("\tok\t" not in r for r in failed)
    assert not any("greet__loop-local__1" in r for r in failed)  # the one trial that passed
    page.select_option("#f-cause", "agent_error")
    only = rows(page, "trials")
    assert len(only) == 1 and "greet__loop-local__2" in only[0]
    page.select_option("#f-cause", "")
    page.fill("#f-task", "count")
    assert len(rows(page, "trials")) == 2
    page.fill("#f-task", "")
    page.fill("#f-min", "0.5")
    assert [r.split("\t")[0] for r in rows(page, "trials")] == ["greet__loop-local__1"]
    page.fill("#f-min", "")
    page.screenshot(path=screenshot_dir / "viewer-job.png", full_page=True)


def test_job_page_shows_summary_matrix_and_charts(page, viewer_url):
    page.goto(f"{viewer_url}/#/job/handmade")
    page.wait_for_selector("table#summary tbody tr", timeout=WAIT_MS)
    summary = rows(page, "summary")[0]
    assert "agent_error 1" in summary and "0.250" in summary
    assert "greet" in page.locator("table#matrix").inner_text()
    assert page.locator("svg[aria-label='reward histogram'] rect.bar").count() == 10
    assert page.locator("svg[aria-label='pass@k'] polyline").count() == 1
    assert "running__loop-local__1" in page.locator("main").inner_text()  # trial without a result
    assert "linked" not in rows(page, "trials")  # a symbolic link to a trial outside is not listed


def test_sorting_by_reward(page, viewer_url):
    page.goto(f"{viewer_url}/#/job/handmade")
    page.wait_for_selector("table#trials tbody tr", timeout=WAIT_MS)
    page.locator("table#trials th", has_text="reward").click()
    page.locator("table#trials th", has_text="reward").click()  # descending
    assert rows(page, "trials")[0].startswith("greet__loop-local__1")


def test_trial_page_shows_one_span_per_completion_token(page, viewer_url, screenshot_dir):
    page.goto(f"{viewer_url}/#/job/handmade/trial/greet__loop-local__1")
    page.wait_for_selector("#step-3", timeout=WAIT_MS)
    step = page.locator("#step-3")
    assert step.locator(".completion .tok").count() == len(COMPLETION_IDS)
    assert step.locator(".tok").all_inner_texts() == [str(i) for i in COMPLETION_IDS]
    assert step.locator(".tok.masked").count() == 1  # loss mask 0 on the last token
    assert "bash" in step.inner_text() and "exit 0" in step.inner_text()  # tool call and observation
    assert page.locator("#step-4 .prefix-break").count() == 1
    assert "proxy call #1" in page.locator("#step-4 > header").inner_text()  # a harness's recorded call
    assert "model qwen-x" in page.locator("#step-4 > header").inner_text()
    assert page.locator("#step-3 .prefix-break").count() == 0
    page.locator("#step-4 details.prompt summary").click()
    assert page.locator("#step-4 .ptok.break").inner_text() == "9"
    assert "checking greet" in page.locator("main").inner_text()  # verifier stdout
    page.screenshot(path=screenshot_dir / "viewer-trial.png", full_page=True)


def test_trial_page_lists_the_training_sequences(page, viewer_url):
    """The capture graph's sequences: one row per path of calls, the second opened by a new root, and a
    step link that scrolls to its step."""
    page.goto(f"{viewer_url}/#/job/handmade/trial/greet__loop-local__1")
    page.wait_for_selector("#sequences", timeout=WAIT_MS)
    rows = page.locator("#sequences tbody tr").all_inner_texts()
    assert len(rows) == 2 and "first" in rows[0]
    assert "new_root at step 4" in rows[1] and "shares 3 tokens with call 0" in rows[1]
    assert "training sequences (2)" in page.locator("main").inner_text()
    page.locator("#sequences tbody tr").nth(1).locator("a").click()
    expect(page.locator("#step-4")).to_be_in_viewport()


def test_hostile_model_output_is_text_and_does_not_run(page, viewer_url):
    # Positive control: the payload does run when a page inserts it as HTML.
    page.set_content(f"<html><body>{HOSTILE}</body></html>")
    page.wait_for_function("window.__pwned !== undefined", timeout=WAIT_MS)
    page.goto(f"{viewer_url}/#/job/handmade/trial/greet__loop-local__2")
    page.wait_for_selector("#step-3", timeout=WAIT_MS)
    assert HOSTILE in page.locator("#step-3 pre.message").inner_text()
    assert HOSTILE in page.locator("pre.failure").inner_text()
    assert "Traceback (most recent call last)" in page.locator("pre.traceback").inner_text()
    page.wait_for_timeout(300)  # give an injected onerror handler the chance to fire
    assert page.evaluate("window.__pwned") is None
    assert page.locator("main script, main img").count() == 0


def test_trial_page_lists_integrity_findings_as_text(page, viewer_url):
    """Each finding's kind, evidence and source on the trial page; the job page's trial list names the kinds.
    The evidence quotes what the sandbox named, so its markup must stay text."""
    page.set_content(f"<html><body>{HOSTILE}</body></html>")  # positive control: the payload runs as HTML
    page.wait_for_function("window.__pwned !== undefined", timeout=WAIT_MS)
    page.goto(f"{viewer_url}/#/job/handmade/trial/greet__loop-local__1")
    page.wait_for_selector("table#integrity", timeout=WAIT_MS)
    [row] = page.locator("table#integrity tbody tr").all_inner_texts()
    assert [cell.strip() for cell in row.split("\t")] == [FINDING.kind.value, FINDING.evidence, "verifier"]
    assert "integrity findings (1)" in page.locator("main").inner_text()
    assert "1 finding(s)" in page.locator(".outcome").inner_text()
    page.wait_for_timeout(300)  # give an injected onerror handler the chance to fire
    assert page.evaluate("window.__pwned") is None and page.locator("main script, main img").count() == 0
    page.goto(f"{viewer_url}/#/job/handmade/trial/greet__loop-local__2")
    page.wait_for_selector("#step-3", timeout=WAIT_MS)
    assert (
        page.locator("table#integrity").count() == 0
        and "no findings" in page.locator(".outcome").inner_text()
    )
    page.goto(f"{viewer_url}/#/job/handmade")
    page.wait_for_selector("table#trials tbody tr", timeout=WAIT_MS)
    flagged = [r for r in rows(page, "trials") if "verifier_place_written" in r]
    assert len(flagged) == 1 and flagged[0].startswith("greet__loop-local__1")
    assert "1 (verifier_place_written 1)" in rows(page, "summary")[0]


def test_log_files_load_on_demand_and_links_are_refused(page, viewer_url, jobs_dir):
    leak = jobs_dir / "handmade/greet__loop-local__1/agent/leak.txt"
    assert "viewer-secret-marker" in leak.read_text()  # positive control: following the link leaks
    page.goto(f"{viewer_url}/#/job/handmade/trial/greet__loop-local__1")
    page.wait_for_selector("details.log", timeout=WAIT_MS)
    logs = page.locator("details.log summary").all_inner_texts()
    assert any("agent/agent.log" in s for s in logs)
    assert not any("leak" in s for s in logs)
    page.locator("details.log", has_text="agent/agent.log").locator("summary").click()
    page.wait_for_selector("details.log[open] pre", timeout=WAIT_MS)
    assert "agent log line" in page.locator("details.log[open] pre").inner_text()
    api = f"{viewer_url}/api/jobs/handmade/trials/greet__loop-local__1/file?path=agent/leak.txt"
    response = page.request.get(api)
    assert response.status == 404 and "viewer-secret-marker" not in response.text()
    linked = page.request.get(f"{viewer_url}/api/jobs/handmade/trials/linked")
    assert linked.status == 404 and "viewer-secret-marker" not in linked.text()


def test_compare_page_shows_per_task_deltas(page, viewer_url, screenshot_dir):
    page.goto(f"{viewer_url}/#/compare/oracle-job/nop-job")
    page.wait_for_selector("table#diff tbody tr", timeout=WAIT_MS)
    diff = rows(page, "diff")
    assert len(diff) == 2
    assert all("-1.000" in r for r in diff)
    page.screenshot(path=screenshot_dir / "viewer-compare.png", full_page=True)


def test_job_page_refreshes_while_the_job_runs(page, tmp_path):
    root = tmp_path / "jobs"
    root.mkdir()
    job_dir = make_handmade_job(root)
    result = json.loads((job_dir / "result.json").read_text())
    result["finished_at"] = None
    (job_dir / "result.json").write_text(json.dumps(result))
    proc, url = start_viewer(root)
    try:
        page.goto(f"{url}/#/job/handmade")
        page.wait_for_selector("#trial-count", timeout=WAIT_MS)
        assert page.locator("#trial-count").inner_text() == "4 of 4 trials"
        assert "live" in page.locator("#status").inner_text()
        done = json.loads((job_dir / "greet__loop-local__1/result.json").read_text())
        done.update(trial_name="running__loop-local__1", task_name="running")
        (job_dir / "running__loop-local__1/result.json").write_text(json.dumps(done))
        expect(page.locator("#trial-count")).to_have_text("5 of 5 trials", timeout=WAIT_MS)
    finally:
        proc.terminate()
        proc.wait(30)
    shutil.rmtree(root)
