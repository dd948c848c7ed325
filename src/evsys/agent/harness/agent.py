"""`HarnessAgent`: an external harness (Claude Code, Codex, mini-swe-agent...) as a one-turn `-a` agent.

Per trial: `prepare_sandbox` (before the sandbox starts) installs the harness once (cached), creates a
recording proxy over the trial's model client, opens a session with its own unix socket and adds the binds
(install tree, socket, forwarder); `setup` starts the forwarder in the sandbox; `run` builds the adapter,
sends the task's instruction as one turn, forwards every event to the trial's event sink (`evsys run
--stream`), writes the events to `agent/harness-events.jsonl`, and puts the proxy's calls (token ids,
logprobs) into the trajectory. A turn that fails (the harness crashed, hung past its session timeout, broke
its protocol) fails the trial with `agent_error`; its model calls are kept. `close` stops the adapter, the
forwarder and the proxy session.

Generation flags: the options `temperature` and `max_tokens` (`--temperature`, `--max-tokens`) fill the
requests that pass none; `max_turns` (`--max-turns`) bounds the harness's model calls: the proxy refuses the
next one, and the turn that ends that way is the trial's normal end (`stop_reason: max_turns`).

MCP: the task's `[environment] mcp_servers` are written into the harness's MCP configuration; with the
option `mcp_tools` (`--harness-mcp-tools`) evsys's own sandbox tools are injected as well, served at the
session's `/mcp` (evsys.agent.harness.sandbox_tools); the calls they served are counted in the metadata."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from evsys.agent.base import Agent, AgentContext, AgentError, AgentResult
from evsys.agent.harness.adapter import HarnessAdapter
from evsys.agent.harness.catalog import HarnessDefinition, get_definition
from evsys.agent.harness.config import ModelEndpoint
from evsys.agent.harness.events import EventLog, HarnessEventType
from evsys.agent.harness.sandbox_tools import SandboxToolService
from evsys.agent.harness.sandboxed import HarnessPlumbing, SandboxLauncher
from evsys.agent.tools import SandboxTools
from evsys.records import AgentInfo, SandboxSpec, TrajectoryRecorder
from evsys.sandbox.base import Sandbox
from evsys.task.models import McpServerConfig
from evsys.util.atomic import write_text_atomic

EVENTS_FILE = "harness-events.jsonl"
NATIVE_TRAJECTORY_FILE = "native-trajectory.json"  # ATIF converted from the harness's own log
DEFAULT_TURN_TIMEOUT = 600.0


class HarnessAgent(Agent):
    """Runs one catalog harness for one turn per trial (see the module docstring)."""

    model_use = "required"

    def __init__(self, definition: HarnessDefinition | str, **options: Any) -> None:
        self.definition = get_definition(definition) if isinstance(definition, str) else definition
        self.name = self.definition.name
        self.version = _version_of(self.definition)
        self.options = options
        self.proxy: Any = None
        self.plumbing: HarnessPlumbing | None = None
        self.endpoint: ModelEndpoint | None = None
        self.adapter: HarnessAdapter | None = None
        self.tool_services: list[SandboxToolService] = []  # one per adapter built with `mcp_tools`

    @property
    def mcp_tools(self) -> bool:
        """Whether evsys's sandbox tools are injected into the harness over MCP (option `mcp_tools`)."""
        return bool(self.options.get("mcp_tools"))

    async def prepare_sandbox(self, spec: SandboxSpec, ctx: AgentContext) -> SandboxSpec:
        """Install (cached), start the proxy and the session; the spec with the harness's binds added."""
        if ctx.model_client is None:
            raise AgentError(f"harness {self.name!r} needs a model: pass -m (e.g. -m local)")
        from evsys.model.proxy import ModelProxy
        from evsys.model.proxy.wire import CallDefaults

        # the job's --temperature/--max-tokens for requests that do not pass their own; --max-turns calls
        defaults = CallDefaults(
            temperature=self.options.get("temperature"),
            max_tokens=self.options.get("max_tokens"),
            max_calls=self.options.get("max_turns"),
        )
        # no listener of its own: the session's unix socket (bound into the sandbox) is the only way in
        self.proxy = ModelProxy(
            ctx.model_client, max_tokens_cap=self.options.get("max_tokens_cap"), defaults=defaults
        )
        self.plumbing = HarnessPlumbing(self.proxy, install=self.definition.install, model=ctx.model_name)
        binds = [*self.definition.binds, *await self.plumbing.binds()]
        return spec.model_copy(update={"binds": [*spec.binds, *binds]})

    async def setup(self, sandbox: Sandbox, ctx: AgentContext) -> None:
        """Start the forwarder inside the sandbox."""
        assert self.plumbing is not None, "prepare_sandbox() runs before setup()"
        self.endpoint = await self.plumbing.connect(sandbox)

    def build_adapter(
        self,
        sandbox: Sandbox,
        workdir: str,
        session_timeout_s: float,
        *,
        mcp_servers: list[McpServerConfig] | None = None,
    ) -> HarnessAdapter:
        """The harness adapter (not started yet) on the forwarder `setup` started; kept as `self.adapter`.
        `mcp_servers` are the task's; with `mcp_tools` the sandbox tools are injected and served too."""
        assert self.endpoint is not None and self.plumbing is not None, "setup() runs before the adapter"
        setup = self.plumbing.harness_setup(
            SandboxLauncher(sandbox),
            self.endpoint,
            workdir=workdir,
            options=self.options,
            session_timeout_s=session_timeout_s,
            mcp=self.mcp_tools,
            mcp_servers=mcp_servers,
        )
        self.adapter = self.definition.build(setup)
        if self.mcp_tools and self.plumbing.session is not None:
            service = SandboxToolService(SandboxTools(sandbox, workdir=workdir))
            service.attach(self.adapter, self.plumbing.session)
            self.tool_services.append(service)
        return self.adapter

    async def run(self, instruction: str, sandbox: Sandbox, ctx: AgentContext) -> AgentResult:
        """One turn with the instruction; the proxy's calls become the trajectory."""
        adapter = self.build_adapter(
            sandbox,
            ctx.workdir,
            ctx.timeout_sec or DEFAULT_TURN_TIMEOUT,
            mcp_servers=ctx.task.config.environment.mcp_servers,
        )
        adapter.config.env_vars.update(ctx.env)  # the job's --agent-env / --env-file
        events = EventLog()
        try:
            await adapter.start()
            async for event in adapter.send_message_streaming(instruction):
                events.append(event)
                ctx.emit({"harness": self.name, **event.model_dump(mode="json")})
        finally:
            await adapter.stop()
            await self._save(ctx, events, instruction)
        last = events.last
        if self.proxy is not None and self.proxy.calls_refused:  # --max-turns ended the turn: not an error
            return AgentResult(metadata={**self._metadata(events), "stop_reason": "max_turns"})
        if last is None or last.type != HarnessEventType.TURN_COMPLETE or last.data.get("status") != "ok":
            reason = last.data.get("error") if last is not None else "the turn produced no events"
            reason = str(reason)
            raise AgentError(reason if repr(self.name) in reason else f"harness {self.name!r}: {reason}")
        return AgentResult(metadata=self._metadata(events))

    async def _save(self, ctx: AgentContext, events: EventLog, instruction: str) -> None:
        """Model calls into the trajectory (also on failure; the instruction alone when the harness made
        none, e.g. it failed before its first call) and the events into the agent's log dir."""
        session = self.plumbing.session if self.plumbing is not None else None
        steps = session.to_steps() if session is not None else []
        ctx.trajectory.extend(steps)
        if not steps:
            ctx.trajectory.add("user", instruction)
        if session is not None:
            ctx.trajectory.agent.tool_definitions = offered_tools(session.calls)
        await asyncio.to_thread(ctx.logs_dir.mkdir, parents=True, exist_ok=True)
        await asyncio.to_thread(write_text_atomic, ctx.logs_dir / EVENTS_FILE, events.jsonl())
        await self._save_native(ctx)

    async def _save_native(self, ctx: AgentContext) -> None:
        """The harness's own log as ATIF (the adapter's `native_steps()`), beside the proxy's view."""
        if self.adapter is None:
            return
        try:
            steps = await self.adapter.native_steps()
        except Exception as exc:  # the native log is a bonus: never fail the trial over it
            ctx.emit({"harness": self.name, "type": "error", "data": {"error": f"native log: {exc}"}})
            return
        if steps:
            recorder = TrajectoryRecorder(
                f"{ctx.trial_name}-native", AgentInfo(name=self.name, version=self.version)
            )
            recorder.extend(steps)
            body = recorder.build().model_dump_json(indent=2) + "\n"
            await asyncio.to_thread(write_text_atomic, ctx.logs_dir / NATIVE_TRAJECTORY_FILE, body)

    def _metadata(self, events: EventLog) -> dict[str, Any]:
        session = self.plumbing.session if self.plumbing is not None else None
        return {
            "harness": self.name,
            "model_calls": len(session.calls) if session is not None else 0,
            "mcp_tool_calls": len(session.tool_calls) if session is not None else 0,
            "events": events.seen,
        }

    async def close(self) -> None:
        """Stop whatever is still running: the adapter, the forwarder, the session and the proxy."""
        if self.adapter is not None:
            with contextlib.suppress(Exception):
                await self.adapter.stop()
        services, self.tool_services = self.tool_services, []
        for service in services:
            with contextlib.suppress(Exception):
                await service.close()
        if self.plumbing is not None:
            await self.plumbing.close()
        if self.proxy is not None:
            await self.proxy.stop()
            self.proxy = None


def _version_of(definition: HarnessDefinition) -> str:
    if definition.install is None or not definition.install.packages:
        return "unknown"
    return ",".join(definition.install.packages)


def offered_tools(calls: list[Any]) -> list[dict[str, Any]] | None:
    """Every distinct tool schema the harness offered its model over the recorded calls, in first-seen order
    (the trajectory's `tool_definitions`; None when it offered none)."""
    seen: dict[str, dict[str, Any]] = {}
    for call in calls:
        for tool in call.tools or []:
            seen.setdefault(json.dumps(tool, sort_keys=True, default=str), tool)
    return list(seen.values()) or None
