"""A verifiers (v1) taskset whose harness calls the model: from inside the runtime, through the rollout's
interception server (the `endpoint` and `secret` verifiers hands every harness), one chat completion.

Under evsys the harness runs in a sandbox with its own network namespace, so the call only gets through
the runtime's loopback relay (`host_url`). The model is evsys's tiny test model behind `evsys model serve`,
trained to answer "Say hello." with a fixed greeting."""

from __future__ import annotations

import verifiers.v1 as vf
from verifiers.v1.clients import ModelContext
from verifiers.v1.configs.harness import HarnessConfig
from verifiers.v1.runtimes import ProgramResult, Runtime
from verifiers.v1.trace import Trace

GREETING_REPLY = "Hello! How can I help you today?"
CHAT_ONCE = """
import json, sys, urllib.request
endpoint, secret, model, prompt = sys.argv[1:5]
body = {"model": model, "temperature": 0, "max_tokens": 32, "messages": [{"role": "user", "content": prompt}]}
request = urllib.request.Request(
    endpoint.rstrip("/") + "/chat/completions",
    data=json.dumps(body).encode(),
    headers={"Authorization": "Bearer " + secret, "Content-Type": "application/json"},
)
reply = json.load(urllib.request.urlopen(request, timeout=120))
open("answer.txt", "w").write(reply["choices"][0]["message"]["content"])
"""


class GreetingTask(vf.Task[vf.TaskData]):
    @vf.reward
    async def greeted(self, runtime: Runtime) -> float:
        try:
            answer = (await runtime.read("answer.txt", max_bytes=4096)).decode().strip()
        except vf.SandboxError:
            return 0.0
        return 1.0 if answer == GREETING_REPLY else 0.0


class GreetingTaskset(vf.Taskset[GreetingTask]):
    def load(self):
        yield GreetingTask(vf.TaskData(name="say-hello", prompt="Say hello."), self.config.task)


class ChatOnceHarness(vf.Harness[HarnessConfig]):
    """Sends the task's prompt to the model once, from inside the runtime, and saves the reply."""

    NEEDS_CONTAINER = False

    async def launch(
        self,
        ctx: ModelContext,
        trace: Trace,
        runtime: Runtime,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: vf.TaskData,
    ) -> ProgramResult:
        argv = ["/usr/bin/python3", "-c", CHAT_ONCE, endpoint, secret, ctx.model, data.prompt_text]
        return await runtime.run_program(argv, {})


__all__ = ["ChatOnceHarness", "GreetingTaskset"]
