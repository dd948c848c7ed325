#!/bin/bash
# Harbor 0.25 needs Python >= 3.12; Debian 12 has 3.11. This makes (once) an Ubuntu 24.04 root filesystem with
# python3.12, the docker CLI and the compose v2 plugin (mmdebstrap from the Ubuntu mirror), and a virtualenv in
# it with harbor==$HARBOR_VERSION (default 0.25.0), all under evsys's cache dir; then runs its arguments inside
# that root filesystem (bubblewrap; /work, /tmp and /root bound at the same paths, the host's network, resolver
# and CA bundle).
#   bench/harbor_rootfs.sh harbor --version
#   HARBOR_VERSION=0.26.0 bench/harbor_rootfs.sh harbor --version
set -euo pipefail
CACHE=${EVSYS_CACHE_DIR:-$HOME/.cache/evsys}/harbor-side
ROOT=$CACHE/rootfs
HARBOR_VERSION=${HARBOR_VERSION:-0.25.0}
VENV=$CACHE/venv
[ "$HARBOR_VERSION" = 0.25.0 ] || VENV=$CACHE/venv-$HARBOR_VERSION
MIRROR=${EVSYS_UBUNTU_MIRROR:-http://archive.ubuntu.com/ubuntu}

inside() {
  bwrap --bind "$ROOT" / --bind /work /work --bind /tmp /tmp --bind /root /root --proc /proc --dev-bind /dev /dev \
    --ro-bind /etc/resolv.conf /etc/resolv.conf --ro-bind /etc/hosts /etc/hosts \
    --ro-bind /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt \
    --setenv PATH "$VENV/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    --unsetenv PIP_FIND_LINKS --die-with-parent "$@"
}

if [ ! -d "$ROOT" ]; then
  mkdir -p "$CACHE"
  rm -rf "$ROOT.partial"
  mmdebstrap --quiet --variant=minbase --components=main,universe \
    --keyring=/usr/share/keyrings/ubuntu-archive-keyring.gpg \
    --include=python3.12,python3.12-venv,python3-pip,ca-certificates,docker.io,docker-compose-v2,git \
    noble "$ROOT.partial" "$MIRROR" >&2
  mv "$ROOT.partial" "$ROOT"
fi
if [ ! -x "$VENV/bin/harbor" ]; then
  rm -rf "$VENV"
  # harbor 0.25.0 (and later) pins certifi>=2026.10.19, newer than some PyPI mirrors hold: its other requirements as
  # published, certifi unpinned, then harbor itself without dependencies
  reqs=$CACHE/harbor-requirements.txt
  inside python3.12 -m venv "$VENV"
  inside "$VENV/bin/pip" download --quiet --no-deps "harbor==$HARBOR_VERSION" -d "$CACHE/wheel" >&2
  wheel=$(ls "$CACHE"/wheel/harbor-"$HARBOR_VERSION"-*.whl)
  unzip -p "$wheel" "harbor-$HARBOR_VERSION.dist-info/METADATA" | sed -n 's/^Requires-Dist: //p' | grep -v 'extra ==' \
    | sed 's/^certifi.*/certifi/' > "$reqs"
  inside "$VENV/bin/pip" install --quiet -r "$reqs" >&2
  inside "$VENV/bin/pip" install --quiet --no-deps "$wheel" >&2
fi
inside "$@"
