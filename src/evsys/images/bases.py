"""Well-known base images synthesised offline with mmdebstrap, for machines that reach package mirrors but no
container registry.

`debian:<codename|number>[-slim]` is a minbase of that release; `ubuntu:<version>` a minbase of that Ubuntu
release; `python:3.X[-slim][-<codename>]` the Debian (or Ubuntu) release whose python3 is 3.X, with
`python3`, `pip`, `venv`, a `python` command and no EXTERNALLY-MANAGED marker, so `pip install` works as in
the official image. The mirrors come from the host's apt configuration. The result is committed into evsys's
storage under the requested name, labelled `org.evsys.synthesised`, so `FROM` resolves to it.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from evsys.images.refs import SynthesisPlan
from evsys.images.storage import ImageError, LineCallback, Storage, run_tool, tool
from evsys.images.toolimages import SYNTH_LABEL, commit_rootfs

DEBIAN_MIRROR = "http://deb.debian.org/debian"
UBUNTU_MIRROR = "http://archive.ubuntu.com/ubuntu"
UBUNTU_KEYRINGS = ("/usr/share/keyrings/ubuntu-archive-keyring.gpg",)
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# python3-venv brings pip's own wheel; pip is installed from it (below), not Debian's python3-pip, so no
# Debian-packaged Python modules (packaging, setuptools...) sit where `pip install` must replace them.
PYTHON_PACKAGES = ("ca-certificates", "netbase", "tzdata", "python3", "python3-venv")
SYNTH_TIMEOUT = 3600.0  # compiling CPython on two busy cores takes a while
# Bumped when a distribution's recipe changes: stored images made by an older recipe are synthesised again.
RECIPE_VERSION = {"debian": 1, "ubuntu": 2, "python": 2, "python-source": 2, "tool": 1}
# On top of mmdebstrap's minbase, what the official image has (Ubuntu's minbase lacks apt and its keyring).
EXTRA_PACKAGES = {"debian": (), "ubuntu": ("apt", "ubuntu-keyring")}


def host_mirror(distribution: str, sources: list[Path] | None = None) -> str:
    """The first mirror of `distribution` the host's apt configuration names (deb822 or one-line format)."""
    if sources is None:
        sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    wanted = re.compile(r"/(debian|ubuntu)/?$")
    for path in sources:
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError):
            continue
        for uri in re.findall(r"(?m)^\s*(?:URIs:\s*|deb\s+(?:\[[^\]]*\]\s+)?)(\S+)", text):
            match = wanted.search(uri)
            if match and match.group(1) == distribution and "security" not in uri:
                return uri.rstrip("/")
    return DEBIAN_MIRROR if distribution == "debian" else UBUNTU_MIRROR


def python_dockerfile(base: str, plan: SynthesisPlan) -> str:
    """The Dockerfile that turns a distribution base into `python:3.X`: python3, venv, pip installed by pip
    itself into /usr/local (from the wheel the distribution ships), a `python` command, no EXTERNALLY-MANAGED
    marker, the official image's LANG and CMD."""
    packages = " ".join(PYTHON_PACKAGES)
    return (
        f"FROM {base}\n"
        "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "
        f"{packages} && rm -rf /var/lib/apt/lists/* "
        f"&& rm -f /usr/lib/python{plan.python}/EXTERNALLY-MANAGED "
        "&& whl=$(ls /usr/share/python-wheels/pip-*.whl | head -n 1) "
        '&& python3 "$whl/pip" install --no-cache-dir --no-index "$whl" '
        "&& ln -sf python3 /usr/bin/python && (test -e /usr/local/bin/pip || ln -s pip3 /usr/local/bin/pip)\n"
        "ENV LANG=C.UTF-8\n"
        f'LABEL {SYNTH_LABEL}="{plan.describe()}"\n'
        'CMD ["python3"]\n'
    )


# What compiling CPython needs on a Debian release (the official image's list less tk-dev and wget: no
# tkinter, the source comes from the mirror); what it keeps at run time is found with ldd afterwards, as the
# official image does. As cheap as honest: no PGO/LTO, `make -j`, no test modules built or installed.
CPYTHON_BUILD_PACKAGES = (
    "dpkg-dev gcc make libbz2-dev libc6-dev libdb-dev libexpat1-dev libffi-dev libgdbm-dev liblzma-dev "
    "libncurses-dev libreadline-dev libsqlite3-dev libssl-dev uuid-dev xz-utils zlib1g-dev"
)
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
# An Ubuntu source's index is verified with the host's Ubuntu archive keyring, copied into the build context.
SOURCE_KEYRING = "evsys-source-keyring.gpg"


def ubuntu_keyring(plan: SynthesisPlan) -> Path:
    """The host's Ubuntu archive keyring, which synthesising `plan` needs."""
    keyring = next((Path(k) for k in UBUNTU_KEYRINGS if Path(k).is_file()), None)
    if keyring is None:
        raise ImageError(
            f"synthesising {plan.describe()} needs Ubuntu's archive keyring ({UBUNTU_KEYRINGS[0]}): "
            "install the ubuntu-keyring package (scripts/bootstrap.sh fetches it)"
        )
    return keyring


def source_context(plan: SynthesisPlan) -> dict[str, Path]:
    """The files the build context of `source_python_dockerfile(plan)` holds besides the Dockerfile."""
    if plan.source_distribution == "ubuntu":
        return {SOURCE_KEYRING: ubuntu_keyring(plan)}
    return {}


def _source_line(plan: SynthesisPlan) -> str:
    """The deb-src line of the archive whose signed Sources index vouches for the `python3.X` source."""
    mirror = host_mirror(plan.source_distribution)
    keyring = KEYRING if plan.source_distribution == "debian" else f"/usr/share/keyrings/{SOURCE_KEYRING}"
    return f"deb-src [signed-by={keyring}] {mirror} {plan.python_source} main"


def source_python_dockerfile(base: str, plan: SynthesisPlan) -> str:
    """The Dockerfile that puts Python 3.X, compiled from the `python3.X` source package of the Debian
    or Ubuntu release `plan.python_source`, into /usr/local of the named release (as the official image
    has it): the release's own userland (OpenSSL, libc...) underneath, `python`, `pip`, no
    EXTERNALLY-MANAGED marker."""
    copy = f"COPY {SOURCE_KEYRING} /usr/share/keyrings/{SOURCE_KEYRING}\n" if source_context(plan) else ""
    script = " && ".join(
        (
            "set -eux",
            "apt-get update",
            "DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "
            f"{' '.join(PYTHON_PACKAGES[:3])}",
            'saved="$(apt-mark showmanual)"',
            "DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "
            f"{CPYTHON_BUILD_PACKAGES}",
            f"echo '{_source_line(plan)}' > /etc/apt/sources.list.d/evsys-python-source.list",
            "apt-get update",
            "mkdir -p /usr/src/python && cd /usr/src/python",
            f"apt-get source --download-only python{plan.python}",
            f"tar -xf python{plan.python}_*.orig.tar.xz --strip-components=1",
            './configure --build="$(dpkg-architecture --query DEB_BUILD_GNU_TYPE)" '
            "--enable-loadable-sqlite-extensions --with-system-expat --with-ensurepip --disable-test-modules",
            'make -j"$(nproc)"',
            "make install",
            "cd / && rm -rf /usr/src/python /etc/apt/sources.list.d/evsys-python-source.list",
            "find /usr/local -depth \\( -type d -a \\( -name test -o -name tests -o -name idle_test \\) \\) "
            "-exec rm -rf '{}' +",
            'apt-mark auto ".*" > /dev/null && apt-mark manual $saved > /dev/null',
            "find /usr/local -type f -executable -not -name '*tkinter*' -exec ldd '{}' ';' "
            """| awk '/=>/ { so = $(NF-1); if (index(so, "/usr/local/") == 1) { next }; """
            """gsub("^/(usr/)?", "", so); printf "*%s\\n", so }' """
            "| sort -u | xargs -r dpkg-query --search | grep -v '^diversion by' | cut -d: -f1 | sort -u "
            "| xargs -r apt-mark manual",
            "apt-get purge -y --auto-remove -o APT::AutoRemove::RecommendsImportant=false",
            "rm -rf /var/lib/apt/lists/*",
            "for src in idle3 pip3 pydoc3 python3 python3-config; do "
            'ln -svT "$src" "/usr/local/bin/$(echo "$src" | tr -d 3)"; done',
            "python --version && pip --version",
        )
    )
    return (
        f"FROM {base}\n"
        f"ENV PATH={BASE_PATH} LANG=C.UTF-8\n"
        f"{copy}"
        f"RUN {script}\n"
        f'LABEL {SYNTH_LABEL}="{plan.describe()}"\n'
        'CMD ["python3"]\n'
    )


def recipe(plan: SynthesisPlan) -> str:
    """The name of the recipe that synthesises `plan` (a key of RECIPE_VERSION)."""
    if plan.python_source:
        return "python-source"
    return "python" if plan.python else plan.distribution


def mmdebstrap_argv(plan: SynthesisPlan, output: Path) -> list[str]:
    """The mmdebstrap command line for `plan`, writing a tarball to `output`."""
    argv = [tool("mmdebstrap"), "--variant=minbase", "--format=tar", "--skip=output/dev"]
    if EXTRA_PACKAGES[plan.distribution]:
        argv.append("--include=" + ",".join(EXTRA_PACKAGES[plan.distribution]))
    if plan.distribution == "ubuntu":
        argv += [f"--keyring={ubuntu_keyring(plan)}", "--components=main,universe"]
    argv.append('--customize-hook=rm -f "$1"/etc/hostname "$1"/etc/resolv.conf')
    return [*argv, plan.suite, str(output), host_mirror(plan.distribution)]


async def synthesise(
    storage: Storage,
    name: str,
    plan: SynthesisPlan,
    *,
    log: Path | None = None,
    on_line: LineCallback | None = None,
) -> None:
    """Build the distribution of `plan` with mmdebstrap and commit it into `storage` as `name`."""
    storage.home.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="synth-", dir=storage.home) as tmp:
        tarball = Path(tmp) / "rootfs.tar"
        result = await run_tool(
            mmdebstrap_argv(plan, tarball), timeout=SYNTH_TIMEOUT, log=log, on_line=on_line
        )
        if result.returncode != 0:
            tail = "\n".join(result.output.strip().splitlines()[-15:])
            raise ImageError(f"synthesising {name} ({plan.describe()}) with mmdebstrap failed:\n{tail}")
        config = ["--env", f"PATH={BASE_PATH}", "--cmd", "bash"]
        await commit_rootfs(storage, name, tarball, config, plan.describe())
