"""Pulling from a real OCI registry (Debian's `docker-registry`, the CNCF distribution registry) started on
127.0.0.1 by the test: by tag, by digest, a missing tag, and htpasswd auth with and without credentials."""

from __future__ import annotations

import base64
import json
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from evsys.images import ImageService, PullError, Storage, parse_ref
from evsys.images.pull import pull

pytestmark = pytest.mark.timeout(600)
USER, PASSWORD = "evsys", "s3cret-pass"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_registry(root: Path, *, auth: bool) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    config = [
        "version: 0.1",
        "log:\n  level: error",
        f"storage:\n  filesystem:\n    rootdirectory: {root / 'data'}",
        f"http:\n  addr: 127.0.0.1:{port}",
    ]
    if auth:
        hashed = subprocess.run(
            ["htpasswd", "-Bbn", USER, PASSWORD], check=True, capture_output=True, text=True
        ).stdout
        (root / "htpasswd").write_text(hashed)
        config.append(f"auth:\n  htpasswd:\n    realm: evsys-test\n    path: {root / 'htpasswd'}")
    (root / "config.yml").write_text("\n".join(config) + "\n")
    proc = subprocess.Popen(
        ["docker-registry", "serve", str(root / "config.yml")],
        stdout=subprocess.DEVNULL,
        stderr=open(root / "registry.log", "wb"),
    )
    for _ in range(100):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc, f"127.0.0.1:{port}"
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"docker-registry did not listen: {(root / 'registry.log').read_text()}")


@pytest.fixture(scope="module")
def registries(tmp_path_factory):
    """An open registry and an htpasswd one, each holding `evsys/tiny:1` (a one-file image pushed here)."""
    if shutil.which("docker-registry") is None or shutil.which("htpasswd") is None:
        pytest.skip("docker-registry or htpasswd missing (scripts/bootstrap.sh installs them)")
    root = tmp_path_factory.mktemp("registries")
    source = Storage(root / "source-storage")
    context = root / "ctx"
    context.mkdir()
    (context / "hello.txt").write_text("hello from the registry\n")
    (context / "Dockerfile").write_text("FROM scratch\nCOPY hello.txt /hello.txt\n")
    subprocess.run(
        source.buildah("bud", "--isolation", "chroot", "-q", "-t", "localhost/tiny:1", str(context)),
        check=True,
        capture_output=True,
    )
    procs, out = [], {}
    try:
        for name, auth in (("open", False), ("locked", True)):
            (root / name).mkdir()
            proc, address = _start_registry(root / name, auth=auth)
            procs.append(proc)
            push = ["skopeo", "copy", "--dest-tls-verify=false"]
            push += ["--dest-creds", f"{USER}:{PASSWORD}"] if auth else []
            subprocess.run(
                [*push, source.transport("localhost/tiny:1"), f"docker://{address}/evsys/tiny:1"],
                check=True,
                capture_output=True,
            )
            out[name] = address
        yield out
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
        source.release()


def _digest(address: str) -> str:
    inspect = subprocess.run(
        ["skopeo", "inspect", "--tls-verify=false", f"docker://{address}/evsys/tiny:1"],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(inspect.stdout)["Digest"]


def _hello(storage: Storage, name: str) -> str:
    image = storage.find(name)
    assert image is not None, f"{name} not in the storage"
    return (storage.layer_dirs(image)[-1] / "hello.txt").read_text()


@pytest.fixture
def storage(tmp_path):
    """A throw-away storage, unmounted afterwards."""
    store = Storage(tmp_path / "storage")
    yield store
    store.release()


@pytest.mark.needs_sandbox
async def test_pull_by_tag_and_by_digest(registries, storage, tmp_path, monkeypatch):
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(tmp_path / "none.json"))
    service = ImageService(storage)
    by_tag, _ = await service.ensure_ref(f"{registries['open']}/evsys/tiny:1")
    assert _hello(storage, by_tag) == "hello from the registry\n"
    digest = _digest(registries["open"])
    by_digest, _ = await service.ensure_ref(f"{registries['open']}/evsys/tiny@{digest}")
    assert by_digest != by_tag and _hello(storage, by_digest) == "hello from the registry\n"


@pytest.mark.needs_sandbox
async def test_a_missing_tag_is_a_clear_error(registries, storage):
    ref = parse_ref(f"{registries['open']}/evsys/tiny:no-such-tag")
    with pytest.raises(PullError) as info:
        await pull(storage, ref)
    assert info.value.kind == "missing"
    assert f"registry {registries['open']} has no such image or tag" in str(info.value)


@pytest.mark.needs_sandbox
async def test_auth_without_credentials_names_the_registry_and_the_auth_file(
    registries, storage, tmp_path, monkeypatch
):
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.docker/config.json
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.delenv("REGISTRY_AUTH_FILE", raising=False)
    ref = parse_ref(f"{registries['locked']}/evsys/tiny:1")
    with pytest.raises(PullError) as info:
        await pull(storage, ref)
    assert info.value.kind == "auth"
    assert registries["locked"] in str(info.value) and "no auth file found" in str(info.value)
    auth = tmp_path / "auth.json"
    token = base64.b64encode(f"{USER}:wrong".encode()).decode()
    auth.write_text(json.dumps({"auths": {registries["locked"]: {"auth": token}}}))
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(auth))
    with pytest.raises(PullError) as info:
        await pull(storage, ref)
    assert info.value.kind == "auth" and f"auth file {auth}" in str(info.value)
    token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    auth.write_text(json.dumps({"auths": {registries["locked"]: {"auth": token}}}))
    await pull(storage, ref)
    assert _hello(storage, str(ref)) == "hello from the registry\n"
