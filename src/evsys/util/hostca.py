"""The host's CA certificates, for builds and sandboxes that reach the network.

A host behind a TLS-inspecting proxy trusts the proxy's certificate in its own CA bundle; an image's bundle
does not. evsys hands the host's bundle to image builds (evsys.images.build, for the build only) and to
sandboxes on an image that have network (evsys.engine.trial.images, as a file placed at start), with the
variables that point common tools at it. Nothing of it is ever stored in an image."""

from __future__ import annotations

from pathlib import Path

HOST_CA_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")
# OpenSSL (Python's ssl, curl, git, Go), requests, pip, curl, Node, git and uv (its native-TLS switch)
CA_VARIABLES = (
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "PIP_CERT",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
    "UV_NATIVE_TLS",
)
SANDBOX_CA_PATH = "/etc/evsys/host-ca.crt"  # where a sandbox on an image finds the host's bundle


def host_ca_bundle() -> Path | None:
    """The host's CA bundle (with any extra certificates it trusts), or None."""
    return next((Path(p) for p in HOST_CA_BUNDLES if Path(p).is_file()), None)


def ca_environment(path: str) -> dict[str, str]:
    """The variables that make common tools trust the bundle at `path`."""
    return {name: "1" if name == "UV_NATIVE_TLS" else path for name in CA_VARIABLES}
