"""Session fixtures that serve the cloud services' stand-ins and point the SDKs at them through their own
environment variables (restored afterwards)."""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

# What the stand-in serves from the host's root file system when a sandbox asks for it by image.
STANDIN_IMAGE = "evsys-standin/host-rootfs:latest"
EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "tasks"


def examples_on_standin_base(dest: Path, names: list[str]) -> Path:
    """Copies of evsys's examples `names` (ones whose Dockerfile is a plain base and WORKDIR /app) under
    `dest` on `FROM STANDIN_IMAGE`: a cloud backend always runs a task's declared base, and the only base the
    stand-ins serve is the host's."""
    for name in names:
        shutil.copytree(EXAMPLES / name, dest / name)
        (dest / name / "environment" / "Dockerfile").write_text(f"FROM {STANDIN_IMAGE}\n")
    return dest


@contextmanager
def environment(**values: str | None) -> Iterator[None]:
    """Set (None: unset) environment variables for the block, restoring the earlier values after it."""
    saved = {name: os.environ.get(name) for name in values}
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="session")
def daytona_standin() -> Iterator[object]:
    """The Daytona stand-in, served for the session, with DAYTONA_API_KEY/DAYTONA_API_URL pointing at it."""
    pytest.importorskip("daytona", reason="the daytona extra is not installed")
    from daytona_standin import DaytonaStandin, serve_standin

    from evsys.sandbox.daytona.sandbox import BASE_IMAGE_VAR

    standin = DaytonaStandin(api_key=secrets.token_hex(16), host_images=frozenset({STANDIN_IMAGE}))
    with (
        serve_standin(standin) as url,
        environment(
            DAYTONA_API_KEY=standin.api_key,
            DAYTONA_API_URL=url,
            DAYTONA_TARGET="us",
            **{BASE_IMAGE_VAR: STANDIN_IMAGE},
        ),
    ):
        yield standin


@pytest.fixture(scope="session")
def e2b_standin() -> Iterator[object]:
    """The E2B stand-in, served for the session; E2B_API_KEY, E2B_API_URL and E2B_SANDBOX_URL point at it."""
    pytest.importorskip("e2b", reason="the e2b extra is not installed")
    from e2b_standin import E2BStandin, serve_standin

    standin = E2BStandin(api_key=f"e2b_{secrets.token_hex(16)}", host_images=frozenset({STANDIN_IMAGE}))
    with (
        serve_standin(standin) as (api_url, sandbox_url),
        environment(E2B_API_KEY=standin.api_key, E2B_API_URL=api_url, E2B_SANDBOX_URL=sandbox_url),
    ):
        yield standin


@pytest.fixture(scope="session")
def modal_standin() -> Iterator[object]:
    """The Modal stand-in, served for the session; MODAL_SERVER_URL and MODAL_TOKEN_ID/SECRET point at it
    (the SDK's client made from them is dropped afterwards)."""
    modal = pytest.importorskip("modal", reason="the modal extra is not installed")
    from modal_standin import new_standin, serve_standin

    from evsys.sandbox.modal.sandbox import BASE_IMAGE_VAR

    standin = new_standin(frozenset({STANDIN_IMAGE}))
    with (
        serve_standin(standin) as url,
        environment(
            MODAL_SERVER_URL=url,
            MODAL_TOKEN_ID=standin.token_id,
            MODAL_TOKEN_SECRET=standin.token_secret,
            **{BASE_IMAGE_VAR: STANDIN_IMAGE},
        ),
    ):
        modal.Client._set_env_client(None)
        try:
            yield standin
        finally:
            modal.Client._set_env_client(None)


def real_service_environment(*names: str) -> dict[str, str | None]:
    """The variables `names` as this process started with them (before any stand-in fixture replaced them)."""
    return {name: os.environ.get(name) for name in names}
