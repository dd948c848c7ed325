"""mini-swe-agent (PyPI `mini-swe-agent`, v2) as an evsys harness: one `mini` process per turn, via the proxy.

Each turn runs `mini --yolo --exit-immediately -c mini.yaml -c <evsys config> --task=<message>
--output=<trajectory>` in the task's working directory. `prepare()` writes the evsys config (JSON, which
mini reads as YAML):

- `model`: litellm's OpenAI provider (`openai/<model>`) with `api_base = <endpoint>/v1`, i.e. OpenAI chat
  completions through the evsys proxy; the session key comes from `OPENAI_API_KEY`. Cost tracking ignores
  unknown models (`cost_tracking: ignore_errors`) and the cost limit is off: the proxy counts tokens.
- `agent`: a step limit (option `step_limit`, default 50) so a turn always ends, a wall-time limit of 90% of
  the session timeout (mini stops and saves its trajectory before evsys would kill it), yolo mode, no exit
  prompt.
- `environment`: a per-command timeout (option `command_timeout`, default 60 s).

The environment keeps mini and litellm off the network and out of the read-only install tree:
`LITELLM_LOCAL_MODEL_COST_MAP=True` (no model-price download at import), `MSWEA_CONFIGURED` (no first-run
setup prompt), `MSWEA_GLOBAL_CONFIG_DIR` under the agent's HOME.

mini prints human-readable text, not events: stdout lines are kept (as `stdout_tail`) but not parsed. Live
events are the proxy's LLM_REQUEST / LLM_RESPONSE; when the process exits, `after_turn` reads mini's
trajectory file (`-o`) and emits its text, tool calls and tool results, and `native_log_to_steps` converts
that file into ATIF steps.

Turns: mini runs one task per process and has no way to continue a conversation, so a second turn on the
same adapter raises `HarnessStateError` (start a new adapter for a new task). mini has no MCP client:
injecting environment tools makes `start()` fail with `HarnessStartError`.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from evsys.agent.harness.adapter import HarnessStartError, HarnessStateError
from evsys.agent.harness.catalog import HarnessDefinition, HarnessSetup
from evsys.agent.harness.config import HarnessConfig
from evsys.agent.harness.events import HarnessEvent, HarnessEventType
from evsys.agent.harness.install import HarnessInstall
from evsys.agent.harness.per_turn import PerTurnHarnessAdapter
from evsys.records import Observation, ObservationResult, Step, StepMetrics, ToolCall

MINI_VERSION = "2.4.6"
# pinned too: unpinned, pip backtracks through dozens of 37 MB litellm wheels (filelock conflicts) and fills
# the install sandbox's /tmp
LITELLM_VERSION = "1.106.2"
# litellm imports `mcp` whenever a request carries tools (mini's bash tool) but does not depend on it
MCP_VERSION = "2.3.0"
WALL_TIME_SHARE = 0.9  # mini stops itself (trajectory saved) at this share of the session timeout
MODEL_RETRIES = 3  # attempts per model call (mini's default 10, with exponential backoff up to 60 s)
DEFAULT_STEP_LIMIT = 50
DEFAULT_COMMAND_TIMEOUT_S = 60
STDOUT_TAIL_LINES = 40

INSTALL = HarnessInstall(
    manager="pip",
    packages=[f"mini-swe-agent=={MINI_VERSION}", f"litellm=={LITELLM_VERSION}", f"mcp=={MCP_VERSION}"],
    prefix="/opt/evsys-harness/mini-swe-agent",
)


def render_config(
    *,
    base_url: str,
    model: str,
    step_limit: int = DEFAULT_STEP_LIMIT,
    command_timeout: int = DEFAULT_COMMAND_TIMEOUT_S,
    wall_time_limit: int = 0,
) -> str:
    """mini's config layered over its own `mini.yaml` (JSON text; YAML is a superset)."""
    config = {
        "model": {
            "model_class": "litellm",
            "model_name": f"openai/{model}",
            "model_kwargs": {"api_base": base_url.rstrip("/") + "/v1", "drop_params": True},
            "cost_tracking": "ignore_errors",
        },
        "agent": {
            "step_limit": step_limit,
            "cost_limit": 0,
            "wall_time_limit_seconds": wall_time_limit,
            "mode": "yolo",
            "confirm_exit": False,
        },
        "environment": {"timeout": command_timeout},
    }
    return json.dumps(config, indent=2) + "\n"


class MiniSweAgentAdapter(PerTurnHarnessAdapter):
    """Runs `mini` once for the (only) turn, against the proxy; see the module docstring."""

    builtin_tools = frozenset({"bash"})

    def __init__(
        self,
        config: HarnessConfig,
        *,
        home: str,
        step_limit: int = DEFAULT_STEP_LIMIT,
        command_timeout: int = DEFAULT_COMMAND_TIMEOUT_S,
        **kwargs: Any,
    ) -> None:
        super().__init__(config, **kwargs)
        self.home = home.rstrip("/")
        self.state_dir = f"{self.home}/.evsys-mini"
        self.step_limit = step_limit
        self.command_timeout = command_timeout
        self.trajectory: dict[str, Any] | None = None  # mini's trajectory file of the turn, once it ran
        self.exit_status = ""  # how mini's run ended: "Submitted", "LimitsExceeded", ...
        self._stdout: deque[str] = deque(maxlen=STDOUT_TAIL_LINES)

    @property
    def mini(self) -> str:
        """The `mini` executable (`config.command[0]`)."""
        return self.config.command[0]

    @property
    def config_path(self) -> str:
        """Where `prepare()` writes the evsys layer of mini's config."""
        return f"{self.state_dir}/evsys.yaml"

    def trajectory_path(self, turn: int) -> str:
        """mini's trajectory output (`-o`) of turn `turn`."""
        return f"{self.state_dir}/turn-{turn}.traj.json"

    @property
    def stdout_tail(self) -> str:
        """The last lines mini printed (its console output)."""
        return "\n".join(self._stdout)

    def render_mcp_config(self) -> bytes | None:
        """Nothing: mini has no MCP client."""
        return None

    async def prepare(self) -> None:
        """Write the evsys config layer (model through the proxy, limits); refuse injected tools."""
        if self.injected_tools:
            names = ", ".join(t.exposed_name for t in self.injected_tools)
            raise HarnessStartError(
                f"harness {self.config.name!r} has no MCP client and cannot use environment tools ({names})"
            )
        if self.endpoint is None:
            raise HarnessStartError(
                f"harness {self.config.name!r} needs a model endpoint (the proxy session)"
            )
        text = render_config(
            base_url=self.endpoint.base_url,
            model=self.config.model or self.endpoint.model,
            step_limit=self.step_limit,
            command_timeout=self.command_timeout,
            wall_time_limit=int(self.config.session_timeout_s * WALL_TIME_SHARE),
        )
        await self.launcher.write_file(self.config_path, text.encode())

    def environment(self) -> dict[str, str]:
        """HOME, PATH with the install's bin dir, the session key, offline litellm, then config variables."""
        bin_dir = self.mini.rpartition("/")[0] or "/usr/bin"
        env = {
            "HOME": self.home,
            "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "MSWEA_CONFIGURED": "true",
            "MSWEA_SILENT_STARTUP": "1",
            "MSWEA_GLOBAL_CONFIG_DIR": f"{self.home}/.config/mini-swe-agent",
            "MSWEA_COST_TRACKING": "ignore_errors",
            "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": str(MODEL_RETRIES),
            "PYTHONDONTWRITEBYTECODE": "1",
            "NO_COLOR": "1",
            "TERM": "dumb",
        }
        if self.endpoint is not None:
            env["OPENAI_API_KEY"] = self.endpoint.api_key
        return {**env, **self.config.env_vars}

    async def send_message_streaming(self, message: str) -> AsyncIterator[HarnessEvent]:
        """The one turn mini can run; a second turn raises HarnessStateError (see the module docstring)."""
        if self.turns >= 1:
            raise HarnessStateError(
                f"harness {self.config.name!r} runs one task per process and cannot continue a conversation: "
                "use a new adapter for another message"
            )
        async for event in super().send_message_streaming(message):
            yield event

    def turn_argv(self, message: str, turn: int) -> list[str]:
        """`mini -y --exit-immediately -c mini.yaml -c <evsys config> --task=<message> -o <trajectory>`."""
        return [
            self.mini,
            "--yolo",
            "--exit-immediately",
            *("-c", "mini.yaml", "-c", self.config_path),
            *self.config.command[1:],
            f"--task={message}",
            f"--output={self.trajectory_path(turn)}",
        ]

    def turn_summary(self, turn: int) -> dict[str, Any]:
        """How mini's run ended (TURN_COMPLETE fields): its exit status and submission."""
        info = (self.trajectory or {}).get("info")
        submission = info.get("submission", "") if isinstance(info, dict) else ""
        return {"exit_status": self.exit_status, "submission": submission}

    async def native_steps(self) -> list[Step]:
        """mini's own trajectory file of the turn as ATIF steps ([] before a turn wrote one)."""
        return native_log_to_steps(self.trajectory) if self.trajectory is not None else []

    def parse_line(self, line: bytes, turn: int) -> list[HarnessEvent]:
        """mini's console text: kept in `stdout_tail`, no events (they come from the trajectory)."""
        self._stdout.append(line.decode("utf-8", "replace").rstrip())
        return []

    async def after_turn(self, turn: int, exit_code: int) -> list[HarnessEvent]:
        """Read mini's trajectory file: its messages as TEXT_OUTPUT / TOOL_CALL / TOOL_RESULT events."""
        raw = await self._read_file(self.trajectory_path(turn))
        if raw is None:
            return []
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError(f"{self.trajectory_path(turn)} is not a JSON object")
        self.trajectory = data
        self.exit_status = exit_status(data)
        return trajectory_events(data, turn)

    async def _read_file(self, path: str) -> bytes | None:
        """A file's bytes where the harness runs (None when it does not exist)."""
        process = await self.launcher.launch(["cat", "--", path], env={}, cwd="/")
        try:
            process.stdin.close()
            data = await process.stdout.read()
            code = await process.wait()
        finally:
            await process.kill()
        return data if code == 0 else None


def _messages(data: dict[str, Any]) -> list[dict[str, Any]]:
    messages = data.get("messages")
    return [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _tool_calls(message: dict[str, Any]) -> list[ToolCall]:
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        raw = function.get("arguments")
        try:
            arguments = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            arguments = None
        calls.append(
            ToolCall(
                tool_call_id=str(call.get("id") or ""),
                function_name=str(function.get("name") or "bash"),
                arguments=arguments if isinstance(arguments, dict) else {"raw": raw},
            )
        )
    return calls


def exit_status(data: dict[str, Any]) -> str:
    """How mini's run ended ("Submitted", "LimitsExceeded", an exception name...; "" if unknown)."""
    info = data.get("info")
    return str(info.get("exit_status") or "") if isinstance(info, dict) else ""


def rejected_reply(message: dict[str, Any]) -> dict[str, Any] | None:
    """The model reply mini rejected (a format error: no or broken tool call). mini does not add it to the
    conversation; it keeps the raw response in the error message's `extra.response`."""
    extra = message.get("extra")
    response = extra.get("response") if isinstance(extra, dict) else None
    choices = response.get("choices") if isinstance(response, dict) else None
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    reply = first.get("message")
    return reply if isinstance(reply, dict) else None


def trajectory_events(data: dict[str, Any], turn: int) -> list[HarnessEvent]:
    """Events for mini's trajectory: the model's text and bash calls (TEXT_OUTPUT, TOOL_CALL), each command's
    output (TOOL_RESULT), and each reply mini rejected (its text, then ERROR kind "format_error")."""
    events: list[tuple[HarnessEventType, dict[str, Any]]] = []
    for message in _messages(data):
        role = message.get("role")
        reply = message if role == "assistant" else rejected_reply(message) if role == "user" else None
        if reply is not None:
            if text := _text(reply.get("content")):
                events.append((HarnessEventType.TEXT_OUTPUT, {"text": text}))
            if reply is message:
                for call in _tool_calls(message):
                    fields = {"id": call.tool_call_id, "name": call.function_name, **call.arguments}
                    events.append((HarnessEventType.TOOL_CALL, fields))
            else:
                error = {"kind": "format_error", "message": _text(message.get("content"))}
                events.append((HarnessEventType.ERROR, error))
        elif role == "tool":
            output = _text(message.get("content"))
            events.append(
                (
                    HarnessEventType.TOOL_RESULT,
                    {"id": message.get("tool_call_id"), "name": "bash", "output": output},
                )
            )
    return [HarnessEvent(type=kind, data=fields, turn=turn) for kind, fields in events]


def _metrics(message: dict[str, Any]) -> StepMetrics | None:
    extra = message.get("extra")
    if not isinstance(extra, dict):
        return None
    response = extra.get("response")
    usage = response.get("usage") if isinstance(response, dict) else None
    if not isinstance(usage, dict):
        return None
    return StepMetrics(
        prompt_tokens=usage.get("prompt_tokens"),
        completion_tokens=usage.get("completion_tokens"),
        cost_usd=extra.get("cost"),
    )


def _agent_step(step_id: int, reply: dict[str, Any], carrier: dict[str, Any]) -> Step:
    """The agent step of one model reply; `carrier` is the trajectory message holding its raw response."""
    return Step(
        step_id=step_id,
        source="agent",
        message=_text(reply.get("content")),
        tool_calls=_tool_calls(reply) or None,
        reasoning_content=reply.get("reasoning_content") or None,
        metrics=_metrics(carrier),
    )


def native_log_to_steps(trajectory: dict[str, Any] | str | bytes) -> list[Step]:
    """ATIF steps from mini's trajectory file (`-o`, format "mini-swe-agent-1.1"): system and user messages,
    one agent step per model response (text, bash calls, token counts from the response's usage; a reply mini
    rejected is rebuilt from the raw response kept with the format-error message that follows it), and each
    tool message as an observation of the step that called it. The final `exit` message is not a step."""
    data = json.loads(trajectory) if isinstance(trajectory, str | bytes) else trajectory
    steps: list[Step] = []
    by_call: dict[str, Step] = {}
    for message in _messages(data if isinstance(data, dict) else {}):
        role, text = message.get("role"), _text(message.get("content"))
        if role == "tool":
            call_id = str(message.get("tool_call_id") or "")
            if (owner := by_call.get(call_id)) is not None:
                owner.observation = owner.observation or Observation()
                owner.observation.results.append(ObservationResult(source_call_id=call_id, content=text))
        elif role == "assistant":
            step = _agent_step(len(steps) + 1, message, message)
            by_call.update({call.tool_call_id: step for call in step.tool_calls or []})
            steps.append(step)
        elif role in ("system", "user"):
            if role == "user" and (reply := rejected_reply(message)) is not None:
                steps.append(_agent_step(len(steps) + 1, reply, message))
            steps.append(Step(step_id=len(steps) + 1, source=role, message=text))
    return steps


def build(setup: HarnessSetup) -> MiniSweAgentAdapter:
    """A mini-swe-agent adapter for a trial sandbox (`-a mini-swe-agent`); options `model`, `step_limit`,
    `command_timeout`."""
    config = HarnessConfig(
        name="mini-swe-agent",
        command=[f"{setup.bin_dir}/mini"],
        working_directory=setup.workdir,
        session_timeout_s=setup.session_timeout_s,
        model=setup.options.get("model"),
    )
    return MiniSweAgentAdapter(
        config,
        home=setup.home,
        step_limit=int(setup.options.get("step_limit", DEFAULT_STEP_LIMIT)),
        command_timeout=int(setup.options.get("command_timeout", DEFAULT_COMMAND_TIMEOUT_S)),
        launcher=setup.launcher,
        endpoint=setup.endpoint,
        mcp=setup.mcp,
    )


DEFINITION = HarnessDefinition(
    name="mini-swe-agent",
    install=INSTALL,
    build=build,
    dialect="openai",
    description="mini-swe-agent (one `mini` run per trial, OpenAI chat completions through the evsys proxy)",
)
