"""`evsys model serve` as a real subprocess: a client that gives up cancels its generation, Ctrl-C exits
promptly and cleanly even mid-generation."""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading

import httpx
import pytest

LAUNCH = "from evsys.cli.model import model_app; model_app()"
SAFETY_TIMEOUT = 120  # seconds; only guards against a hung test, never asserts speed
LONG = {"model": "local", "prompt": "Once upon a time", "max_tokens": 4000, "ignore_eos": True}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """The serve command over the default model, its stderr read line by line in a thread."""

    def __init__(self) -> None:
        self.port = _free_port()
        env = {**os.environ, "COLUMNS": "400", "NO_COLOR": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", LAUNCH, "serve", "-m", "local", "--port", str(self.port)],
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        self.wait_for("serving")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.put(line)
        self.lines.put("")

    def wait_for(self, text: str) -> str:
        while True:
            line = self.lines.get(timeout=SAFETY_TIMEOUT)
            self.seen.append(line)
            assert line, f"the server exited before printing {text!r}: {''.join(self.seen)}"
            if text in line:
                return line

    def rest(self) -> str:
        while (line := self.lines.get(timeout=SAFETY_TIMEOUT)) != "":
            self.seen.append(line)
        return "".join(self.seen)


@pytest.mark.needs_process
def test_disconnect_cancels_generation_and_ctrl_c_exits_cleanly():
    server = Server()
    try:
        try:  # the client gives up long before 4000 tokens are generated
            httpx.post(f"{server.url}/completions", json=LONG, timeout=httpx.Timeout(60, read=3))
            raise AssertionError("a 4000-token generation answered before the client gave up")
        except httpx.ReadTimeout:
            pass
        assert "generation cancelled" in server.wait_for("client disconnected")
        with httpx.stream(
            "POST",
            f"{server.url}/chat/completions",
            timeout=SAFETY_TIMEOUT,
            json={
                "model": "local",
                "messages": [{"role": "user", "content": "Tell a story."}],
                "max_tokens": 4000,
                "ignore_eos": True,
                "stream": True,
            },
        ) as streamed:
            chunks = streamed.iter_lines()
            assert next(chunks).startswith("data: ")  # generation is under way
            server.proc.send_signal(signal.SIGINT)  # one Ctrl-C
            rest = list(chunks)
        code = server.proc.wait(timeout=SAFETY_TIMEOUT)
        output = server.rest()
        print(output)
        assert code in (0, 130), output  # 130: the conventional status of a process stopped by Ctrl-C
        assert "Traceback" not in output and "terminate called" not in output, output
        assert any("shut down" in line for line in rest), rest  # the stream says why it ended
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait()
