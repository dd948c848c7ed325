"""Harness installs: built once in a throwaway networked sandbox, cached on the host, given to trials."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
import tarfile
import zipfile
from pathlib import Path

import pytest

from evsys.agent.harness.install import HarnessInstall, HarnessInstaller, HarnessInstallError
from evsys.records import SandboxSpec
from evsys.sandbox.local.sandbox import LocalSandbox

TINY_HARNESS = Path(__file__).with_name("tiny_harness.py")


def build_wheel(target: Path) -> Path:
    """A real wheel of the tiny harness (package `evsys_tiny_harness`, console script `tiny-harness`)."""
    name, version = "evsys_tiny_harness", "0.1.0"
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": TINY_HARNESS.read_bytes(),
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: evsys-tiny-harness\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: evsys-tests\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
        f"{dist}/entry_points.txt": f"[console_scripts]\ntiny-harness = {name}:main\n".encode(),
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = target / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return wheel


def build_npm_tarball(target: Path) -> Path:
    """A real npm package tarball with one executable, `tiny-node-harness`, that prints a ready line."""
    files = {
        "package/package.json": json.dumps(
            {"name": "evsys-tiny-node-harness", "version": "0.1.0", "bin": {"tiny-node-harness": "cli.js"}}
        ).encode(),
        "package/cli.js": b"#!/usr/bin/env node\n"
        b'console.log(JSON.stringify({type: "ready", name: "tiny-node"}));\n',
    }
    tarball = target / "evsys-tiny-node-harness-0.1.0.tgz"
    with tarfile.open(tarball, "w:gz") as archive:
        for path, data in files.items():
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), 0o755
            archive.addfile(info, io.BytesIO(data))
    return tarball


class CountingFactory:
    """Makes LocalSandboxes and remembers the specs it was asked for."""

    def __init__(self) -> None:
        self.specs: list[SandboxSpec] = []

    def __call__(self, spec: SandboxSpec) -> LocalSandbox:
        self.specs.append(spec)
        return LocalSandbox(spec)


@pytest.fixture
def wheel(tmp_path) -> Path:
    return build_wheel(tmp_path)


@pytest.mark.needs_sandbox
async def test_install_once_then_cached_and_runnable_without_network(tmp_path, wheel):
    """Two concurrent ensure() calls build once (network on); a later installer reuses the cache; a no-network
    trial sandbox gets the tree and runs the harness from it."""
    factory = CountingFactory()
    install = HarnessInstall(manager="pip", local_packages=[wheel])
    installer = HarnessInstaller(tmp_path / "cache", sandbox_factory=factory)
    first, second = await asyncio.gather(installer.ensure(install), installer.ensure(install))
    assert first == second and (first / "bin" / "tiny-harness").exists()
    assert installer.builds == 1 and len(factory.specs) == 1
    assert factory.specs[0].network == "public"
    record = json.loads((tmp_path / "cache" / install.key() / "install.json").read_text())
    assert record["key"] == install.key()

    again = HarnessInstaller(tmp_path / "cache", sandbox_factory=factory)
    assert await again.ensure(install) == first and again.builds == 0 and len(factory.specs) == 1

    bind = await again.bind(install)
    assert bind.read_only and bind.dst == install.prefix
    async with LocalSandbox(SandboxSpec(name="harness-install-trial", binds=[bind])) as trial:
        result = await trial.exec(f"{install.bin_dir}/tiny-harness --no-tools < /dev/null", timeout=60)
        tamper = await trial.exec(f"echo x > {install.bin_dir}/tiny-harness", user="root")
    assert result.ok, result.stderr
    ready = json.loads(result.stdout.splitlines()[0])
    assert ready["type"] == "ready" and ready["name"] == "tiny-harness"
    assert not tamper.ok  # the cached tree is read-only in trials, even for the sandbox's root


@pytest.mark.needs_sandbox
async def test_failed_install_is_reported_and_not_cached(tmp_path):
    """A package that cannot be installed raises with pip's message; nothing lands in the cache."""
    bogus = tmp_path / "not_a_wheel-0.1-py3-none-any.whl"
    bogus.write_bytes(b"this is not a zip archive")
    install = HarnessInstall(manager="pip", local_packages=[bogus])
    installer = HarnessInstaller(tmp_path / "cache")
    with pytest.raises(HarnessInstallError, match=r"pip install of .* failed with exit code"):
        await installer.ensure(install)
    assert not installer.is_cached(install) and installer.builds == 0


def test_install_spec_validation_names_the_problem(tmp_path):
    """Empty installs, relative prefixes and missing local files are refused with the field named."""
    with pytest.raises(ValueError, match="at least one entry in packages or local_packages"):
        HarnessInstall(manager="pip")
    with pytest.raises(ValueError, match="prefix must be an absolute path"):
        HarnessInstall(manager="npm", packages=["x"], prefix="opt/h")
    with pytest.raises(ValueError, match=r"local_packages: .* is not a file"):
        HarnessInstall(manager="pip", local_packages=[tmp_path / "missing.whl"])
    npm = HarnessInstall(manager="npm", packages=["@openai/codex@0.1.0"])
    assert npm.bin_dir == "/opt/evsys-harness/node_modules/.bin"
    assert (
        "npm install" in npm.command() and "--prefix /opt/evsys-harness @openai/codex@0.1.0" in npm.command()
    )
    assert npm.key() != HarnessInstall(manager="npm", packages=["@openai/codex@0.2.0"]).key()


def test_a_changed_install_procedure_gets_a_new_cache_key(monkeypatch):
    """A tree cached by an older install command is never handed out for a newer one."""
    install = HarnessInstall(manager="npm", packages=["@openai/codex@0.1.0"])
    before = install.key()
    original = HarnessInstall.command
    monkeypatch.setattr(HarnessInstall, "command", lambda self: original(self) + " --ignore-scripts")
    assert install.key() != before


@pytest.mark.needs_sandbox
async def test_npm_install_is_cached_and_its_bin_runs_in_a_trial(tmp_path):
    """An npm package installs into the prefix once; its bin runs in a no-network trial sandbox."""
    install = HarnessInstall(manager="npm", local_packages=[build_npm_tarball(tmp_path)])
    installer = HarnessInstaller(tmp_path / "cache")
    tree = await installer.ensure(install)
    assert (tree / "node_modules" / ".bin" / "tiny-node-harness").exists() and installer.builds == 1
    spec = SandboxSpec(name="harness-npm-trial", binds=[await installer.bind(install)])
    async with LocalSandbox(spec) as trial:
        result = await trial.exec(f"{install.bin_dir}/tiny-node-harness", timeout=60)
    assert result.ok, result.stderr
    assert json.loads(result.stdout) == {"type": "ready", "name": "tiny-node"}
    assert installer.builds == 1


@pytest.mark.needs_sandbox
async def test_installs_from_the_real_registries_work_in_a_cold_cache(tmp_path):
    """npm and pip reach their registries from the install sandbox (through this machine's TLS setup) and the
    trees work in a no-network trial."""
    installer = HarnessInstaller(tmp_path / "cache")
    npm = HarnessInstall(manager="npm", packages=["is-number@7.0.0"], prefix="/opt/evsys-harness/npm")
    pip = HarnessInstall(manager="pip", packages=["six==1.16.0"], prefix="/opt/evsys-harness/pip")
    spec = SandboxSpec(
        name="harness-registry-trial", binds=[await installer.bind(npm), await installer.bind(pip)]
    )
    async with LocalSandbox(spec) as trial:
        node = await trial.exec(f"node -e \"console.log(require('{npm.prefix}/node_modules/is-number')(5))\"")
        python = await trial.exec(f"{pip.prefix}/bin/python -c 'import six; print(six.__version__)'")
    assert node.stdout.strip() == "true", node.stderr
    assert python.stdout.strip() == "1.16.0", python.stderr
