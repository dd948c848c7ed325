"""The thin python layer: on a host that runs a python base's release with /usr/bin/python3.X and its
distribution's pip, the local sandbox gives the task `python` and `pip` as the official image has them, pip
installs (no network: a local wheel) and the package imports; the host's own /usr/local is hidden, /usr stays
read-only, and a reset drops what pip installed. A task on such a base runs on the host and says so."""

from __future__ import annotations

import base64
import hashlib
import shutil
import zipfile
from pathlib import Path

import pytest
from sandbox_helpers import spec

from evsys.engine import AgentSpec, Job, JobConfig
from evsys.records import FileCopy
from evsys.sandbox import LocalSandbox
from evsys.task.hostbase import DEBIAN, host_facts

pytestmark = pytest.mark.needs_sandbox
WHEEL = "evsysprobe-1.0-py3-none-any.whl"
SITE = "/usr/local/lib/python{}/dist-packages/evsysprobe/__init__.py"


def _layer_python() -> str:
    """The python version the host serves through the layer (the test skips on a host with none)."""
    host = host_facts()
    if host.distribution != "debian" or not host.layer_pythons:
        pytest.skip(f"this host ({host.describe()}) has no Debian /usr/bin/python3.X with pip")
    return host.layer_pythons[0]


def _wheel(directory: Path) -> Path:
    """A pure-Python wheel with a module and a console script, built by hand (no network, no build tools)."""
    files = {
        "evsysprobe/__init__.py": "def main():\n    print('evsysprobe-ran')\n",
        "evsysprobe-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: evsysprobe\nVersion: 1.0\n",
        "evsysprobe-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        "evsysprobe-1.0.dist-info/entry_points.txt": "[console_scripts]\nevsysprobe = evsysprobe:main\n",
    }
    record = ""
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record += f"{name},sha256={digest},{len(text.encode())}\n"
    files["evsysprobe-1.0.dist-info/RECORD"] = record + "evsysprobe-1.0.dist-info/RECORD,,\n"
    directory.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(directory / WHEEL, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return directory / WHEEL


async def test_pip_installs_into_the_sandboxs_own_usr_local_and_a_reset_drops_it(tmp_path):
    version = _layer_python()
    wheel = _wheel(tmp_path / "wheels")
    sandbox = LocalSandbox(spec(host_python=version, files=[FileCopy(src=wheel, dst="/wheels/")]))
    await sandbox.start()
    try:
        # the control: the host's pip as it is refuses to install (PEP 668), and /usr is the host's, read-only
        refused = await sandbox.exec(
            f"env -u PIP_BREAK_SYSTEM_PACKAGES python{version} -m pip install --no-index /wheels/{WHEEL}",
            user="root",
        )
        assert refused.exit_code != 0 and "externally-managed-environment" in refused.stderr
        assert (await sandbox.exec("touch /usr/bin/evsys-probe", user="root")).exit_code != 0
        found = await sandbox.exec("command -v python pip; python --version; ls /usr/local/bin", user="root")
        lines = found.stdout.split()
        assert lines[:4] == ["/usr/local/bin/python", "/usr/local/bin/pip", "Python", lines[3]]
        assert lines[3].startswith(f"{version}.")
        assert "issues" not in lines and "docker" not in lines  # the host's own /usr/local/bin is hidden
        installed = await sandbox.exec(
            f"pip install --no-index /wheels/{WHEEL} && evsysprobe && "
            "python -c 'import evsysprobe; print(evsysprobe.__file__)'",
            user="root",
        )
        assert installed.exit_code == 0, installed.stderr
        assert installed.stdout.split()[-2:] == ["evsysprobe-ran", SITE.format(version)]
        as_agent = await sandbox.exec(
            "python -c 'import evsysprobe; print(evsysprobe.__file__)'", user="agent"
        )
        assert as_agent.stdout.strip() == SITE.format(
            version
        )  # root's install is everyone's, as in the image
        # the agent cannot plant a `python` (or anything) where root's commands find it
        attack = "echo 'echo pwned' > /usr/local/bin/python3; touch /usr/local/bin/evil; echo ran > ~/attack"
        await sandbox.exec(attack, user="agent")
        after = await sandbox.exec("cat ~agent/attack; python3 -c 'print(7)'; ls /usr/local/bin", user="root")
        assert after.stdout.split()[:2] == ["ran", "7"]  # the attack ran; root's python3 is still Python
        assert "evil" not in after.stdout.split()
        await sandbox.reset()
        gone = await sandbox.exec("python -c 'import evsysprobe'; command -v evsysprobe", user="root")
        assert "No module named 'evsysprobe'" in gone.stderr and gone.stdout == ""
    finally:
        await sandbox.stop()


async def test_a_task_on_a_python_base_the_host_provides_runs_on_the_host_with_python_and_pip(tmp_path):
    version = _layer_python()
    codename = next(c for c, (number, _) in DEBIAN.items() if number == host_facts().release)
    task = tmp_path / "dataset" / "on-host-python"
    _wheel(task / "environment")
    (task / "task.toml").write_text('[task]\nname = "on-host-python"\n')
    (task / "instruction.md").write_text("Install the wheel in /app.\n")
    base = f"python:{version}-slim-{codename}"
    (task / "environment" / "Dockerfile").write_text(f"FROM {base}\nWORKDIR /app\nCOPY {WHEEL} /app/\n")
    (task / "solution").mkdir()
    (task / "solution" / "solve.sh").write_text(
        f"#!/bin/bash\npython -c 'import sys; print(sys.version_info[1])' > /app/minor\n"
        f"pip install --no-index /app/{WHEEL} && python -c 'import evsysprobe' && touch /app/agent-ok\n"
    )
    (task / "tests").mkdir()
    (task / "tests" / "test.sh").write_text(
        "#!/bin/bash\nset -e\n"
        f'[ "$(cat /app/minor)" = {version.split(".")[1]} ] && [ -e /app/agent-ok ]\n'
        f"pip install --no-index /app/{WHEEL}\n"
        '[ "$(evsysprobe)" = evsysprobe-ran ] && echo 1 > /logs/verifier/reward.txt\n'
    )
    config = JobConfig(datasets=[task.parent], agents=[AgentSpec(name="oracle")], jobs_dir=tmp_path / "jobs")
    (trial,) = (await Job(config).run()).trials
    assert trial.failure is None and trial.reward == 1.0
    assert trial.ran_on_host_image is True and trial.image is not None
    assert (trial.image.ref, trial.image.source, trial.image.key) == (
        base,
        "host",
        f"host:debian-{host_facts().release}+python{version}",
    )


async def test_the_examples_run_on_the_host_where_it_provides_their_bases(examples_dir, tmp_path):
    _layer_python()
    dataset = tmp_path / "examples"
    shutil.copytree(examples_dir / "tasks", dataset)
    config = JobConfig(datasets=[dataset], agents=[AgentSpec(name="oracle")], jobs_dir=tmp_path / "jobs")
    trials = (await Job(config).run()).trials
    assert len(trials) >= 8
    assert {t.task_name: (t.reward, t.failure) for t in trials} == {t.task_name: (1.0, None) for t in trials}
    for trial in trials:  # none built, pulled or synthesised an image
        assert trial.ran_on_host_image and trial.image is not None, trial.task_name
        assert trial.image.key is not None and trial.image.key.startswith("host:debian-"), trial.task_name
