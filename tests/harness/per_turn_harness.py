"""A tiny one-process-per-turn harness for tests (stdlib only): reads the message on stdin, calls the model.

Run as `/usr/bin/python3 -I per_turn_harness.py --state FILE --pids FILE`. It reads the conversation so far
from the state file, appends the message read from stdin, makes one OpenAI chat-completions call
(OPENAI_BASE_URL / OPENAI_API_KEY / EVSYS_MODEL), prints evsys JSON event lines and saves the conversation
back, so a second turn continues the first. It appends its pid (and its children's) to the pids file.
A message starting with a command misbehaves on purpose: `!crash` (exits 4 after one event), `!hang`
(starts a child and sleeps forever), `!garbage` (prints a non-protocol line, then sleeps), `!background`
(leaves a child holding stdout open and exits 0)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request


def emit(kind: str, **fields: object) -> None:
    print(json.dumps({"type": kind, **fields}), flush=True)


def record_pid(path: str, pid: int) -> None:
    with open(path, "a") as f:
        f.write(f"{pid}\n")


def complete(history: list[dict]) -> dict:
    body = {"model": os.environ.get("EVSYS_MODEL", "tiny"), "messages": history, "max_tokens": 16}
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={
            "Authorization": f"Bearer {os.environ['OPENAI_API_KEY']}",
            "Content-Type": "application/json",
        },
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.load(response)["choices"][0]["message"]


def misbehave(command: str, pids: str) -> None:
    if command == "!crash":
        emit("text_output", text="about to crash")
        print("fatal: per-turn harness crashed on purpose", file=sys.stderr, flush=True)
        sys.exit(4)
    if command in ("!hang", "!background"):
        child = subprocess.Popen(["sleep", "3600"])
        record_pid(pids, child.pid)
        emit("text_output", text="child started")
        if command == "!background":
            sys.exit(0)
        time.sleep(3600)
    if command == "!garbage":
        print("Segmentation fault (this is not a protocol line)", flush=True)
        time.sleep(3600)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--state", required=True)
    parser.add_argument("--pids", required=True)
    args = parser.parse_args()
    record_pid(args.pids, os.getpid())
    message = sys.stdin.read()
    misbehave(message.split(" ", 1)[0].strip(), args.pids)
    history = []
    if os.path.exists(args.state):
        with open(args.state) as f:
            history = json.load(f)
    history.append({"role": "user", "content": message})
    reply = complete(history)
    history.append({"role": "assistant", "content": reply.get("content") or ""})
    emit("text_output", text=reply.get("content") or "")
    emit("turn_complete")
    with open(args.state, "w") as f:
        json.dump(history, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
