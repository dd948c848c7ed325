"""A harness agent class for CLI tests (`-a stream_agents:TinyHarnessAgent`): the tiny harness."""

from __future__ import annotations

from pathlib import Path

from evsys.agent.harness import HarnessConfig, StdioHarnessAdapter
from evsys.agent.harness.agent import HarnessAgent
from evsys.agent.harness.catalog import HarnessDefinition, HarnessSetup
from evsys.records import Bind

TINY_HARNESS = Path(__file__).with_name("tiny_harness.py")
IN_SANDBOX = "/opt/evsys-test/tiny_harness.py"


def tiny_definition(name: str, *args: str, session_timeout_s: float | None = None) -> HarnessDefinition:
    """A catalog entry running the tiny harness (with `args`) from a read-only bind."""

    def build(setup: HarnessSetup) -> StdioHarnessAdapter:
        config = HarnessConfig(
            name=name,
            command=["/usr/bin/python3", "-I", IN_SANDBOX, *args],
            working_directory=setup.workdir,
            startup_timeout_s=20,
            session_timeout_s=session_timeout_s or setup.session_timeout_s,
        )
        return StdioHarnessAdapter(config, launcher=setup.launcher, endpoint=setup.endpoint)

    bind = Bind(src=TINY_HARNESS, dst=IN_SANDBOX)
    return HarnessDefinition(name=name, install=None, build=build, dialect="openai", binds=(bind,))


class TinyHarnessAgent(HarnessAgent):
    """HarnessAgent over the tiny harness."""

    def __init__(self, **options: object) -> None:
        super().__init__(tiny_definition("tiny-harness", "--no-tools"), **options)
