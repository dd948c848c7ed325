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
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
VENV = Path(os.environ.get("EVSYS_VERIFIERS_VENV", REPO / ".venv-verifiers"))
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


class ScriptedChat(BaseHTTPRequestHandler):
    """An OpenAI chat-completions server playing examples/guess's first game (secret 13): a hint call with a
    bad argument, one with a good one, a wrong guess, then the right one after the simulator's answer. Every
    request it gets is kept in `REQUESTS`."""

    REQUESTS: list[dict] = []

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.REQUESTS.append(request)
        step = len(self.REQUESTS)
        message: dict = {"role": "assistant", "content": {3: "15", 4: "13"}.get(step, "")}
        if step <= 2:
            kind = "bogus" if step == 1 else "half"
            call = {"name": "hint", "arguments": json.dumps({"kind": kind})}
            message["tool_calls"] = [{"id": f"call-{step}", "type": "function", "function": call}]
        choice = {"index": 0, "message": message, "finish_reason": "tool_calls" if step <= 2 else "stop"}
        usage = {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
        body = {"id": f"chat-{step}", "object": "chat.completion", "created": 0, "model": request["model"]}
        self._send({**body, "choices": [choice], "usage": usage})

    def _send(self, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def play_guess(tmp_path: Path, *args: str) -> tuple[dict, list[dict], dict]:
    """`vf-eval` on examples/guess's first game against `ScriptedChat`: the game's trace, the model's requests
    and the evsys trial's result.json."""
    ScriptedChat.REQUESTS.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), ScriptedChat)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        model = ["-m", "scripted", "--client.base-url", url, "--client.api-key-var", "EVSYS_TEST_MODEL_KEY"]
        dataset = ["--env.taskset.dataset", str(REPO / "examples" / "guess")]
        jobs = ["--env.taskset.jobs-dir", str(tmp_path / "jobs"), "-n", "1"]
        on_host = ["--env.agent.runtime.type", "subprocess"]  # the harness runs nothing in it
        traces = vf_eval(
            tmp_path, "guess", *model, *dataset, *jobs, *on_host, *args, taskset="evsys_python_tasks"
        )
    finally:
        server.shutdown()
    (result,) = (tmp_path / "jobs").glob("*/guess-1__*/result.json")
    return traces["guess-1"], list(ScriptedChat.REQUESTS), json.loads(result.read_text())


@pytest.mark.slow
@needs_venv
def test_a_python_tasks_tools_and_respond_hook_reach_the_verifiers_rollout(tmp_path: Path) -> None:
    trace, requests, recorded = play_guess(tmp_path)
    # the task's tool selection: its custom `hint`, no built-in sandbox tool (bash, submit)
    assert {t["function"]["name"] for t in requests[0]["tools"]} == {"hint"}
    tool_results = [m["content"] for m in requests[2]["messages"] if m["role"] == "tool"]
    assert "kind" in tool_results[0] and "parity" in tool_results[0]  # the bad argument was refused
    assert tool_results[1] == "11-20"  # the custom tool ran with the validated argument
    # the respond hook's answer to the wrong guess reached the model as the next user message
    assert requests[3]["messages"][-1] == {"role": "user", "content": "15 is too high: guess again."}
    assert len(requests) == 4  # the hook ended the game at the right guess
    assert trace["ok"] and not trace["errors"], trace["errors"]
    # the reward is evsys's verifier's: the discounted trajectory rubric, right at the fourth model turn
    assert trace["rewards"]["evsys"]["score"] == recorded["reward"] == pytest.approx(0.8**3)
    assert trace["metrics"]["evsys/turn_4"] == 1.0 and trace["metrics"]["evsys/turn_3"] == 0.0
    assert trace["num_output_tokens"] > 0  # verifiers' interception recorded the model's calls


@pytest.mark.slow
@needs_venv
def test_a_verifiers_turn_limit_ends_the_evsys_episode_and_it_is_still_scored(tmp_path: Path) -> None:
    trace, requests, recorded = play_guess(tmp_path, "--env.agent.max-turns", "3")
    assert len(requests) == 3  # the hints and the wrong guess; verifiers refused the fourth call
    assert trace["stop_condition"] == "max_turns" and not trace["errors"], trace["errors"]
    # the harness still waited for the evsys verifier: its reward and per-key rewards are on the trace
    assert trace["rewards"]["evsys"]["score"] == recorded["reward"] == 0.0  # never guessed
    assert {k: v for k, v in trace["metrics"].items() if k.startswith("evsys/")} == {
        f"evsys/{key}": value for key, value in recorded["rewards"].items()
    }
    assert "evsys/turn_3" in trace["metrics"]
