"""The cloud backends' command wrapper runs as root: a trial's environment must never choose what it runs. An
agent plants a fake `setpriv` and `env` in a directory it owns and puts it first on the command's PATH."""

from __future__ import annotations

import os

import pytest

from evsys.records import SandboxSpec
from evsys.sandbox.daytona.sandbox import DaytonaSandbox

pytestmark = [pytest.mark.asyncio, pytest.mark.security]

PLANT = (
    "mkdir -p /tmp/evil && printf '#!/bin/bash\\nid -u >> /tmp/evil/ran-as\\nexec /usr/bin/env \"$@\"\\n' "
    "> /tmp/evil/env && cp /tmp/evil/env /tmp/evil/setpriv && chmod 755 /tmp/evil/env /tmp/evil/setpriv"
)
EVIL_PATH = {"PATH": "/tmp/evil:/usr/sbin:/usr/bin:/sbin:/bin"}


async def test_a_planted_setpriv_or_env_on_the_commands_path_never_runs_as_root(daytona_standin):
    async with DaytonaSandbox(SandboxSpec(name=f"cloud-path-attack-{os.getpid()}")) as box:
        assert (await box.exec(PLANT)).ok
        uid = (await box.exec("id -u")).stdout
        control = await box.exec("env true; setpriv --help >/dev/null; cat /tmp/evil/ran-as", env=EVIL_PATH)
        assert control.stdout == uid * 2  # positive control: the fakes run when the command itself calls them
        await box.exec("rm -f /tmp/evil/ran-as")
        for user in ("agent", "root"):
            assert (await box.exec("echo done", env=EVIL_PATH, user=user)).stdout == "done\n"
        ran = await box.exec("cat /tmp/evil/ran-as 2>/dev/null || echo never", user="root")
        assert ran.stdout == "never\n", "the wrapper ran a program from the trial's PATH"
