"""verifiers (v1) runs its rollouts in evsys sandboxes (`evsys.integrations.verifiers`).

verifiers pins package versions evsys's own extras cannot share (mcp, openai), so it lives in
`.venv-verifiers` (scripts/bootstrap.sh makes it); these tests drive that virtualenv: verifiers' own
evaluation entry point (`vf-eval`) on a small taskset with its `subprocess` runtime and with evsys, and the
runtime contract checks in verifiers_venv/ under verifiers' own interpreter."""

from __future__ import annotations

import importlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
VENV = REPO / ".venv-verifiers"
PLUGINS = HERE / "vf_plugins"
EXPECTED = {"count-words": 1.0, "uppercase": 1.0, "sum-numbers": 0.0, "last-line": 1.0}

needs_venv = pytest.mark.skipif(
    not (VENV / "bin" / "vf-eval").exists(),
    reason=f"{VENV} is missing: scripts/bootstrap.sh installs verifiers there (it cannot share evsys's venv)",
)


def venv_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{REPO / 'src'}:{PLUGINS}", "EVSYS_TEST_MODEL_KEY": "unused"}


def vf_eval(out: Path, run: str, *args: str, taskset: str = "evsys_shell_tasks") -> dict[str, dict]:
    """Run `vf-eval` on a test taskset; each task's trace, by task name."""
    argv = [str(VENV / "bin" / "vf-eval"), taskset, "--no-rich", "--no-push", "-o", str(out)]
    argv += ["--run.name", run, *args]
    done = subprocess.run(argv, cwd=out, env=venv_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    traces = {}
    for line in (out / run / "traces.jsonl").read_text().splitlines():
        trace = json.loads(line)["traces"][0]
        traces[trace["task"]["data"]["name"]] = trace
    return traces


def scores(traces: dict[str, dict]) -> dict[str, float]:
    return {name: trace["rewards"]["correct"]["score"] for name, trace in traces.items()}


@pytest.mark.slow
@needs_venv
def test_vf_eval_scores_the_same_on_evsys_as_on_its_subprocess_runtime(tmp_path: Path) -> None:
    host = vf_eval(tmp_path, "subprocess", "--env.agent.runtime.type", "subprocess")
    boxed = vf_eval(tmp_path, "evsys", "--env.id", "evsys_env")
    imaged = vf_eval(tmp_path, "image", "--env.id", "evsys_env", "--env.sandbox.image", "python:3.11-slim")
    assert scores(host) == scores(boxed) == scores(imaged) == EXPECTED
    assert {t["agent"]["runtime"]["image"] for t in imaged.values()} == {"python:3.11-slim"}
    assert {t["agent"]["runtime"]["type"] for t in host.values()} == {"subprocess"}
    assert {t["agent"]["runtime"]["type"] for t in boxed.values()} == {"evsys"}
    assert all(t["ok"] and not t["errors"] for t in boxed.values())
    # each rollout had a sandbox of its own
    assert len({t["agent"]["runtime"]["id"] for t in boxed.values()}) == len(EXPECTED)
    lines = {name: t["metrics"]["input_lines"] for name, t in boxed.items()}
    assert lines == {name: t["metrics"]["input_lines"] for name, t in host.items()}


@pytest.mark.slow
@needs_venv
def test_runtime_contract_under_verifiers_interpreter() -> None:
    done = subprocess.run(
        [
            str(VENV / "bin" / "python"),
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            str(HERE / "verifiers_venv"),
        ],
        cwd=REPO,
        env=venv_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-4000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout, done.stdout[-2000:]


def test_package_imports_without_verifiers() -> None:
    code = (
        "import sys; sys.modules['verifiers'] = None\n"
        "import evsys.integrations.verifiers as v\n"
        "try:\n    v.EvsysRuntime\nexcept ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'evsys[verifiers]'" in out.stdout
    assert importlib.import_module("evsys.integrations.verifiers").__all__


@pytest.fixture(scope="module")
def model_url() -> Iterator[str]:
    """`evsys model serve` over the tiny test model (as model `tiny`) on host loopback; its /v1 URL."""
    from evsys.testing.tiny_model import DEMO_RECIPE, build_tiny_model

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    launch = "from evsys.cli.model import model_app; model_app()"
    argv = [sys.executable, "-c", launch, "serve", "-m", f"local:{build_tiny_model(DEMO_RECIPE)}"]
    argv += ["--port", str(port), "--served-model-name", "tiny"]
    server = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stderr is not None
        for line in server.stderr:  # "serving ..." once the model is loaded and the socket listens
            if line.startswith("serving"):
                break
        else:
            pytest.fail(f"evsys model serve exited with {server.wait()}")
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.terminate()
        server.wait()


@pytest.mark.slow
@needs_venv
def test_a_harness_in_the_sandbox_reaches_the_model_through_the_interception(
    tmp_path: Path, model_url: str
) -> None:
    model = ["-m", "tiny", "--client.base-url", model_url, "--client.api-key-var", "EVSYS_TEST_MODEL_KEY"]
    on_host = ["--env.agent.runtime.type", "subprocess"]
    host = vf_eval(tmp_path, "subprocess", *model, *on_host, taskset="evsys_model_tasks")
    boxed = vf_eval(tmp_path, "evsys", *model, "--env.id", "evsys_env", taskset="evsys_model_tasks")
    for traces in (host, boxed):
        trace = traces["say-hello"]
        assert trace["rewards"]["greeted"]["score"] == 1.0, trace["errors"]
        assert trace["num_output_tokens"] > 0  # the interception recorded the model's answer
    assert boxed["say-hello"]["agent"]["runtime"]["type"] == "evsys"
