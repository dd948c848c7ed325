"""No aiohttp session is left for the garbage collector: a model client used across event loops (a call, a
failing call, a cancelled call) and a recording proxy whose factory makes a client per session close every
session they open, so no "Unclosed client session" / "Unclosed connector" warning is printed. Each path runs
in a fresh interpreter with -X dev against a real OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"
REPLY = {
    "id": "c",
    "model": "ok",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "fine"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1},
}


def chat_app() -> FastAPI:
    """Model `ok` answers, `fail` is a 400, `slow` answers after 30 s."""
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> JSONResponse:
        model = (await request.json())["model"]
        if model == "fail":
            return JSONResponse({"error": {"message": "no such thing"}}, status_code=400)
        if model == "slow":
            await asyncio.sleep(30)
        return JSONResponse(REPLY)

    return app


@pytest.fixture(scope="module")
def server(serve_app) -> Iterator[str]:
    with serve_app(chat_app()) as url:
        yield url + "/v1"


def run(mode: str, url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(HERE)]), "PYTHONWARNINGS": "default"}
    argv = [sys.executable, "-X", "dev", str(HERE / "session_leaks.py"), mode, url]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "finished" in done.stdout, done.stderr[-3000:]
    return done


def test_the_detector_sees_a_session_left_open(server: str) -> None:
    """Positive control: a session nobody closes is reported on stderr."""
    assert "Unclosed client session" in run("leak", server).stderr


@pytest.mark.parametrize("mode", ["client", "proxy"])
def test_no_session_is_left_unclosed(server: str, mode: str) -> None:
    stderr = run(mode, server).stderr
    assert "Unclosed" not in stderr and "unclosed" not in stderr, stderr[-3000:]
