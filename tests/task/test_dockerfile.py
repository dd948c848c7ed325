"""Dockerfile handling: the image-free directives are applied, the rest marks the task as needing an image."""

from __future__ import annotations

from pathlib import Path

import pytest

from evsys.task import TaskLoadError, hostbase, load_task, parse_dockerfile
from evsys.task.dockerfile import split_instructions
from evsys.task.loader import IMAGE_NOTE


def _context(tmp_path: Path, files: dict[str, str]) -> Path:
    context = tmp_path / "environment"
    for relative, text in files.items():
        path = context / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    context.mkdir(exist_ok=True)
    return context


def _copies(env) -> dict[str, str]:
    return {c.dst: c.src.name for c in env.files}


def test_continuations_comments_and_line_numbers():
    text = "# header\nFROM debian\n\nENV A=1 \\\n    # a comment inside\n    B=2\nRUN echo \\\n  hi\n"
    ins = split_instructions(text)
    assert [(i.line, i.keyword) for i in ins] == [(2, "FROM"), (4, "ENV"), (7, "RUN")]
    assert ins[1].args == "A=1 B=2"


def test_workdir_chains_relative_to_the_previous(tmp_path):
    env, problems = parse_dockerfile("FROM ubuntu\nWORKDIR /srv\nWORKDIR app\nWORKDIR ../lib/./x\n", tmp_path)
    assert env.workdir == "/srv/lib/x" and problems == []


def test_workdir_defaults_to_app_and_task_toml_wins(tmp_path, make_task):
    assert parse_dockerfile("FROM ubuntu\n", tmp_path)[0].workdir == "/app"
    task = load_task(
        make_task(toml='[environment]\nworkdir = "/data"\n', dockerfile="FROM ubuntu\nWORKDIR /srv\n")
    )
    assert task.environment.workdir == "/data"


def test_env_forms_and_expansion(tmp_path):
    text = (
        "FROM python:3.11\n"
        'ENV BASE=/opt/tool MODE="fast mode"\n'
        "ENV BIN_DIR ${BASE}/bin\n"
        "ENV FULL=$BIN_DIR/run OTHER=${MISSING:-fallback} ALT=${BASE:+set} EMPTY=${MISSING:+x}\n"
        "WORKDIR $BASE/work\n"
    )
    env, problems = parse_dockerfile(text, tmp_path)
    assert problems == []
    assert env.env == {
        "BASE": "/opt/tool",
        "MODE": "fast mode",
        "BIN_DIR": "/opt/tool/bin",
        "FULL": "/opt/tool/bin/run",
        "OTHER": "fallback",
        "ALT": "set",
        "EMPTY": "",
    }
    assert env.workdir == "/opt/tool/work"


def test_arg_defaults_expand_but_are_not_exported(tmp_path):
    env, _ = parse_dockerfile("ARG VERSION=3\nFROM ubuntu\nENV V=v$VERSION\n", tmp_path)
    assert env.env == {"V": "v3"}


def test_task_toml_env_overrides_dockerfile_env(make_task):
    task = load_task(
        make_task(
            toml='[environment]\nenv = { A = "toml" }\n', dockerfile="FROM ubuntu\nENV A=docker B=docker\n"
        )
    )
    assert task.environment.env == {"A": "toml", "B": "docker"}


def test_copy_file_into_workdir_and_explicit_paths(tmp_path):
    context = _context(tmp_path, {"a.txt": "a", "b.txt": "b", "c.txt": "c"})
    text = "FROM ubuntu\nWORKDIR /app\nCOPY a.txt .\nCOPY b.txt data/renamed.txt\nCOPY c.txt /etc/conf/\n"
    env, problems = parse_dockerfile(text, context)
    assert problems == []
    assert _copies(env) == {
        "/app/a.txt": "a.txt",
        "/app/data/renamed.txt": "b.txt",
        "/etc/conf/c.txt": "c.txt",
    }
    assert all(c.src.is_absolute() and c.src.exists() for c in env.files)


def test_copy_directory_keeps_the_tree(tmp_path):
    context = _context(tmp_path, {"src/pkg/mod.py": "x", "src/top.py": "y"})
    env, problems = parse_dockerfile('FROM ubuntu\nWORKDIR /app\nCOPY ["src", "code"]\n', context)
    assert problems == []
    (copy,) = env.files
    assert copy.dst == "/app/code" and copy.src == (context / "src").resolve()
    assert (copy.src / "pkg" / "mod.py").exists()


def test_copy_glob_and_several_sources_go_into_a_directory(tmp_path):
    context = _context(tmp_path, {"one.json": "1", "two.json": "2", "skip.txt": "s", "x.md": "x"})
    env, problems = parse_dockerfile("FROM ubuntu\nCOPY *.json input/\nADD skip.txt x.md /docs\n", context)
    assert problems == []
    assert _copies(env) == {
        "/input/one.json": "one.json",
        "/input/two.json": "two.json",
        "/docs/skip.txt": "skip.txt",
        "/docs/x.md": "x.md",
    }


@pytest.mark.parametrize("source", ["../secret.txt", "sub/../../secret.txt", "../*"])
def test_copy_escaping_environment_is_an_error(tmp_path, source):
    (tmp_path / "secret.txt").write_text("s")
    context = _context(tmp_path, {"sub/f": "f"})
    env, problems = parse_dockerfile(f"FROM ubuntu\nCOPY {source} /app/\n", context)
    assert [str(p) for p in problems] == [
        f"environment/Dockerfile:2: COPY source '{source}' is outside environment/"
    ]
    assert env.files == []


def test_copy_symlink_escaping_environment_is_an_error(tmp_path):
    (tmp_path / "secret.txt").write_text("s")
    context = _context(tmp_path, {})
    (context / "link").symlink_to(tmp_path / "secret.txt")
    _, problems = parse_dockerfile("FROM ubuntu\nCOPY link /app/\n", context)
    assert [str(p) for p in problems] == [
        "environment/Dockerfile:2: COPY source 'link' is outside environment/"
    ]


def test_copy_missing_source_and_bad_arguments(tmp_path):
    context = _context(tmp_path, {})
    text = "FROM ubuntu\nCOPY nothing.txt /app/\nCOPY *.csv /app/\nCOPY onlyone\nCOPY --bogus=1 a b\n"
    _, problems = parse_dockerfile(text, context)
    assert [str(p) for p in problems] == [
        "environment/Dockerfile:2: COPY source 'nothing.txt' does not exist in environment/",
        "environment/Dockerfile:3: COPY source '*.csv' matches no file in environment/",
        "environment/Dockerfile:4: COPY needs at least one source and a destination",
        "environment/Dockerfile:5: COPY has an unknown flag --bogus",
    ]


def test_chown_and_chmod_flags_are_kept(tmp_path):
    context = _context(tmp_path, {"run.sh": "x"})
    env, problems = parse_dockerfile(
        "FROM ubuntu\nCOPY --chown=agent:agent --chmod=755 run.sh /app/run.sh\n", context
    )
    assert problems == []
    (options,) = env.copy_options
    assert (options.line, options.dst, options.chown, options.chmod) == (
        2,
        "/app/run.sh",
        "agent:agent",
        "755",
    )


def test_run_needs_an_image_with_its_line_number(tmp_path, monkeypatch):
    monkeypatch.setattr(hostbase, "host_facts", lambda: BOOKWORM_HOST)
    env, problems = parse_dockerfile(
        "FROM debian:12\nWORKDIR /app\n\nRUN apt-get update && \\\n  apt-get install -y jq\n", tmp_path
    )
    assert problems == []
    assert env.needs_image
    assert env.image_reasons == ["environment/Dockerfile:4: RUN needs an image build"]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (
            "FROM nvidia/cuda:12.0-base\n",
            "environment/Dockerfile:1: FROM nvidia/cuda:12.0-base needs its image",
        ),
        (
            "FROM ubuntu AS build\nFROM debian\n",
            "environment/Dockerfile:2: a multi-stage build needs an image build",
        ),
        (
            "FROM ubuntu\nCOPY --from=build /x /y\n",
            "environment/Dockerfile:2: COPY --from=build needs an image build",
        ),
        (
            "FROM ubuntu\nADD https://example.com/f.txt /app/\n",
            "environment/Dockerfile:2: ADD of a URL needs an image build",
        ),
        (
            "FROM ubuntu\nADD data.tar.gz /app/\n",
            "environment/Dockerfile:2: ADD of an archive (ADD extracts it)",
        ),
    ],
)
def test_directives_that_need_an_image(tmp_path, text, reason):
    env, _ = parse_dockerfile(text, tmp_path)
    assert env.needs_image
    assert any(r.startswith(reason) for r in env.image_reasons), env.image_reasons


BOOKWORM_HOST = hostbase.HostFacts("debian", "12", python="3.11", pip_usable=False)


@pytest.mark.parametrize(
    ("image", "runs_on_host"),
    [
        ("debian:bookworm-slim", True),
        ("docker.io/library/debian:12", True),
        ("debian:trixie", False),  # another release
        ("ubuntu:24.04", False),  # another distribution
        ("python:3.11-slim-bookworm", False),  # the host has no `python` and its pip is externally managed
        ("python:3.13-slim-bookworm", False),
        ("busybox", False),  # evsys cannot tell what it provides
        ("alpine:3.20", False),
    ],
)
def test_only_a_base_the_host_provides_runs_without_its_image(tmp_path, monkeypatch, image, runs_on_host):
    monkeypatch.setattr(hostbase, "host_facts", lambda: BOOKWORM_HOST)
    env, problems = parse_dockerfile(f"FROM --platform=linux/amd64 {image}\nWORKDIR /app\n", tmp_path)
    assert env.needs_image is not runs_on_host and problems == []
    assert env.base_image == image
    if not runs_on_host:
        assert env.base_reason == env.image_reasons[0]
        assert env.base_reason.startswith(f"environment/Dockerfile:1: FROM {image} needs its image")


def test_recorded_directives_and_users(tmp_path, monkeypatch):
    monkeypatch.setattr(hostbase, "host_facts", lambda: BOOKWORM_HOST)
    text = 'FROM debian:bookworm\nEXPOSE 80\nCMD ["bash"]\nENTRYPOINT bash\nUSER root\nUSER builder\n'
    env, problems = parse_dockerfile(text, tmp_path)
    assert env.ignored == [
        "environment/Dockerfile:2: EXPOSE is not applied by the local sandbox",
        "environment/Dockerfile:3: CMD is not applied by the local sandbox",
    ]
    # an ENTRYPOINT changes what runs before the agent: the task runs on its image, which runs it at start
    assert env.needs_image
    assert env.image_reasons == [
        "environment/Dockerfile:4: ENTRYPOINT runs at sandbox start on the task's image"
    ]
    assert env.user == "builder"
    assert [(p.severity, str(p)) for p in problems] == [
        (
            "warning",
            "environment/Dockerfile:6: USER builder is unknown to the local sandbox (it runs "
            "as 'agent' or 'root')",
        ),
    ]


def test_unknown_instruction_is_an_error(make_task):
    with pytest.raises(TaskLoadError) as info:
        load_task(make_task(dockerfile="FROM ubuntu\nFROBNICATE now\n"))
    assert str(info.value) == "environment/Dockerfile:2: unknown instruction 'FROBNICATE'"


def test_needing_an_image_loads_with_warnings(make_task):
    task = load_task(make_task(dockerfile="FROM ubuntu\nWORKDIR /w\nRUN pip install numpy\n"))
    assert task.environment.needs_image
    assert task.environment.workdir == "/w"
    assert task.warnings == [f"environment/Dockerfile:3: RUN needs an image build ({IMAGE_NOTE})"]


def test_docker_compose_needs_an_image(make_task):
    task = load_task(make_task(files={"environment/docker-compose.yaml": "services: {}\n"}))
    assert task.environment.needs_image
    assert task.environment.image_reasons == [
        "environment/docker-compose.yaml: a docker-compose environment needs an image build"
    ]


def test_prebuilt_docker_image_needs_a_runtime(make_task):
    task = load_task(make_task(toml='[environment]\ndocker_image = "org/custom:1"\n'))
    assert task.environment.needs_image
    # the image is how evsys runs the task, not a problem of it: said, but no warning
    assert task.environment.base_reason == task.environment.image_reasons[0]
    assert "image 'org/custom:1' is pulled at run time" in task.environment.base_reason
    assert task.warnings == []


def test_copy_directory_with_a_link_outside_is_an_error(tmp_path):
    (tmp_path / "secret.txt").write_text("s")
    context = _context(tmp_path, {"data/ok.txt": "ok"})
    (context / "data" / "leak").symlink_to(tmp_path / "secret.txt")
    env, problems = parse_dockerfile("FROM ubuntu\nCOPY data /app/data\n", context)
    assert [str(p) for p in problems] == [
        "environment/Dockerfile:2: COPY source 'data/leak' links outside environment/"
    ]
    assert env.files == []


def test_a_dockerfile_without_from_warns(tmp_path):
    env, problems = parse_dockerfile("WORKDIR /w\n", tmp_path)
    assert env.workdir == "/w"
    assert [(p.severity, str(p)) for p in problems] == [
        ("warning", "environment/Dockerfile:1: no FROM line; the local sandbox uses the host's /usr")
    ]


def test_heredocs_stay_with_their_instruction_and_the_escape_directive_is_honoured(tmp_path):
    text = (
        "# escape=`\n"
        "FROM ubuntu\n"
        "RUN <<EOF\napt-get update\nWORKDIR /not-an-instruction\nEOF\n"
        "COPY <<-CONF /etc/x.conf\n\ta=1\n\tCONF\n"
        "ENV A=1 `\n    B=2\n"
        "WORKDIR /srv\n"
    )
    ins = split_instructions(text)
    keywords = [(i.line, i.keyword) for i in ins]
    assert keywords == [(2, "FROM"), (3, "RUN"), (7, "COPY"), (10, "ENV"), (12, "WORKDIR")]
    assert ins[1].args == "<<EOF\napt-get update\nWORKDIR /not-an-instruction\nEOF"
    env, problems = parse_dockerfile(text, tmp_path)
    assert [p for p in problems if p.severity == "error"] == []
    assert env.workdir == "/srv" and env.env == {"A": "1", "B": "2"}
    assert env.needs_image and any("inline file (heredoc)" in r for r in env.image_reasons)
    assert any(r.startswith("environment/Dockerfile:3: RUN") for r in env.image_reasons)
