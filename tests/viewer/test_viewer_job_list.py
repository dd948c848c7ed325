"""The viewer's job list: each job's state (only a complete job is "done"), a text filter over job name,
agent, model and dataset, a state filter, and sorting by a column: through the API and in headless
chromium."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.testclient import TestClient
from viewer_jobs import make_cancelled_job, make_handmade_job, start_viewer

from evsys.records import JobResult, TrialResult
from evsys.viewer.app import JobSource, create_app

WAIT_MS = 30_000  # a guard against a hung page, not a speed assertion
SAFETY_TIMEOUT = 60
STATES = {
    "cancelled-job": "cancelled",
    "handmade": "incomplete",
    "done-job": "done",
    "running-job": "running/stopped",
}


def _rewrite_trials(job_dir: Path, **update) -> None:
    for path in job_dir.glob("*/result.json"):
        trial = TrialResult.model_validate_json(path.read_text())
        path.write_text(trial.model_copy(update=update).model_dump_json())


def make_jobs(root: Path) -> Path:
    """Four jobs, one per state; done-job ran another model on another dataset."""
    root.mkdir(parents=True)
    make_handmade_job(root)
    make_cancelled_job(root)
    done = make_handmade_job(root, "done-job")
    _rewrite_trials(done, model="openai:gpt-mini", dataset="swe-mini")
    (done / "running__loop-local__1").rename(done / "finished__loop-local__1")
    result = JobResult.model_validate_json((done / "result.json").read_text())
    (done / "result.json").write_text(result.model_copy(update={"complete": True}).model_dump_json())
    running = make_handmade_job(root, "running-job")
    (running / "result.json").unlink()
    return root


@pytest.fixture(scope="module")
def list_jobs(tmp_path_factory) -> Path:
    return make_jobs(tmp_path_factory.mktemp("joblist") / "jobs")


def test_the_api_gives_each_job_its_state_and_datasets(list_jobs):
    api = TestClient(create_app(JobSource(list_jobs)), base_url="http://127.0.0.1:8765")
    jobs = {j["name"]: j for j in api.get("/api/jobs").json()["jobs"]}
    assert {name: j["state"] for name, j in jobs.items()} == STATES
    assert jobs["done-job"]["datasets"] == ["swe-mini"] and jobs["handmade"]["datasets"] == ["tasks"]
    assert api.get("/api/jobs/cancelled-job").json()["state"] == "cancelled"


@pytest.fixture(scope="module")
def list_url(list_jobs):
    proc, url = start_viewer(list_jobs)
    yield url
    proc.terminate()
    proc.wait(SAFETY_TIMEOUT)


def _rows(page) -> list[str]:
    return page.locator("table#jobs tbody tr").all_inner_texts()


def _names(page) -> list[str]:
    return [r.split("\t")[1] for r in _rows(page)]


@pytest.mark.slow
def test_a_cancelled_job_is_not_shown_as_done(page, list_url):
    page.goto(f"{list_url}/")
    page.wait_for_selector("table#jobs tbody tr", timeout=WAIT_MS)
    badges = {name: page.locator("table#jobs tbody tr", has_text=name).locator(".badge") for name in STATES}
    for name, state in STATES.items():
        assert badges[name].inner_text().startswith(state), name
    assert badges["done-job"].get_attribute("class") == "badge ok"  # green only when complete
    assert badges["cancelled-job"].get_attribute("class") == "badge bad"


@pytest.mark.slow
def test_filtering_the_job_list_by_text_and_state(page, list_url):
    page.goto(f"{list_url}/")
    page.wait_for_selector("table#jobs tbody tr", timeout=WAIT_MS)
    assert sorted(_names(page)) == sorted(STATES)
    page.fill("#f-jobs", "gpt-mini")  # a model
    assert _names(page) == ["done-job"]
    page.fill("#f-jobs", "SWE")  # a dataset, any case
    assert _names(page) == ["done-job"]
    page.fill("#f-jobs", "job")  # job names
    assert sorted(_names(page)) == ["cancelled-job", "done-job", "running-job"]
    page.select_option("#f-status", "cancelled")
    assert _names(page) == ["cancelled-job"]
    assert page.locator("#job-count").inner_text() == "1 of 4 jobs"
    page.fill("#f-jobs", "")
    page.select_option("#f-status", "incomplete")
    assert _names(page) == ["handmade"]


@pytest.mark.slow
def test_sorting_the_job_list_by_a_column(page, list_url):
    page.goto(f"{list_url}/")
    page.wait_for_selector("table#jobs tbody tr", timeout=WAIT_MS)
    header = page.locator("table#jobs th", has_text="job")
    header.first.click()
    assert _names(page) == sorted(STATES)
    header.first.click()  # descending
    assert _names(page) == sorted(STATES, reverse=True)
    page.locator("table#jobs th", has_text="models").click()
    assert _names(page)[-1] == "done-job"  # local sorts before openai:gpt-mini
