"""task.toml parsing: every schema key, unknown keys, legacy keys, syntax and type errors."""

from __future__ import annotations

import pytest

from evsys.task import TaskLoadError, load_task, parse_size_mb

FULL_TOML = """
schema_version = "1.4"

[task]
name = "full"
version = "2.1"
description = "every key"

[metadata]
difficulty = "hard"
category = "demo"
tags = ["a", "b"]
anything = { nested = 1 }

[verifier]
timeout_sec = 120
env = { MODE = "strict" }
user = "root"
environment_mode = "separate"

[agent]
timeout_sec = 30.5
setup_timeout_sec = 90
user = "agent"

[environment]
build_timeout_sec = 300
docker_image = "python:3.12"
cpus = 2
memory_mb = 2048
storage_mb = 4096
gpus = 0
env = { FOO = "bar" }
workdir = "/work"
network_mode = "allowlist"
allowed_hosts = ["pypi.org"]
healthcheck = { command = "true", interval_sec = 1 }
mcp_servers = [{ name = "files", command = "mcp-files" }]

[solution]
env = { HINT = "1" }
"""


def test_every_schema_key_parses(make_task):
    task = load_task(make_task(toml=FULL_TOML))
    cfg = task.config
    assert (cfg.schema_version, cfg.task.name, cfg.task.version, cfg.task.description) == (
        "1.4",
        "full",
        "2.1",
        "every key",
    )
    assert cfg.metadata["tags"] == ["a", "b"] and cfg.metadata["anything"] == {"nested": 1}
    assert (cfg.verifier.timeout_sec, cfg.verifier.env, cfg.verifier.user) == (
        120,
        {"MODE": "strict"},
        "root",
    )
    assert cfg.verifier.environment_mode == "separate"
    assert (cfg.agent.timeout_sec, cfg.agent.setup_timeout_sec, cfg.agent.user) == (30.5, 90, "agent")
    env = cfg.environment
    assert (env.build_timeout_sec, env.docker_image, env.cpus, env.memory_mb, env.storage_mb, env.gpus) == (
        300,
        "python:3.12",
        2,
        2048,
        4096,
        0,
    )
    assert (env.network_mode, env.allowed_hosts, env.workdir) == ("allowlist", ["pypi.org"], "/work")
    assert (env.healthcheck.command, env.healthcheck.interval_sec) == ("true", 1.0)
    assert [(m.name, m.transport, m.command) for m in env.mcp_servers] == [("files", "stdio", "mcp-files")]
    assert cfg.solution.env == {"HINT": "1"}
    assert task.name == "full"
    assert task.environment.workdir == "/work" and task.environment.env == {"FOO": "bar"}
    assert task.warnings == []


def test_unknown_keys_warn_and_are_kept(make_task):
    toml = '[task]\nname = "x"\ncolour = "blue"\n\n[agent]\nretries = 3\n\n[extras]\nfoo = 1\n'
    task = load_task(make_task(toml=toml))
    unknown = "(kept, but neither evsys nor Harbor uses it)"
    assert f"task.toml:task.colour: unknown key {unknown}" in task.warnings
    assert f"task.toml:agent.retries: unknown key {unknown}" in task.warnings
    assert f"task.toml:extras: unknown section {unknown}" in task.warnings
    assert task.config.task.colour == "blue"
    assert task.config.agent.retries == 3
    assert task.config.extras == {"foo": 1}


HARBOR_TASK_TOML = """
version = "1.0"
source = "a public task set"

[task]
name = "org/demo"
description = "d"
authors = [{ name = "A. Author", email = "a@example.com" }]
keywords = ["k"]

[metadata]
difficulty = "easy"

[verifier]
timeout_sec = 60.0

[agent]
timeout_sec = 60.0

[environment]
os = "linux"
gpu_types = ["h100"]
"""


def test_every_harbor_key_is_known(make_task):
    task = load_task(make_task(toml=HARBOR_TASK_TOML))
    assert task.config.schema_version == "1.0"  # `version` is the older spelling, as Harbor reads it
    # descriptive keys pass silently; a key that changes the run but is not applied says so
    assert task.warnings == [
        "task.toml:environment.gpu_types: Harbor's key for GPU selection: evsys does not apply it yet "
        "(the task runs without it)"
    ]


def test_harbor_keys_inside_arrays_of_tables_are_checked(make_task):
    toml = '[task]\nname = "x"\nauthors = [{ name = "A", emial = "a@x" }]\n'
    task = load_task(make_task(toml=toml))
    assert task.warnings == [
        "task.toml:task.authors.emial: unknown key (kept, but neither evsys nor Harbor uses it); "
        "did you mean 'task.authors.email'?"
    ]


def test_a_misspelt_section_gets_a_did_you_mean(make_task):
    task = load_task(make_task(toml="[verifer]\ntimeout_sec = 5\n\n[agent]\ntimout_sec = 3\n"))
    assert (
        "task.toml:verifer: unknown section (kept, but neither evsys nor Harbor uses it); "
        "did you mean 'verifier'?" in task.warnings
    )
    assert (
        "task.toml:agent.timout_sec: unknown key (kept, but neither evsys nor Harbor uses it); "
        "did you mean 'agent.timeout_sec'?" in task.warnings
    )


def test_free_form_tables_do_not_warn(make_task):
    toml = '[metadata]\nwhatever = 1\n\n[environment]\nenv = { ANY_NAME = "v" }\n'
    assert load_task(make_task(toml=toml)).warnings == []


@pytest.mark.parametrize(
    ("legacy", "megabytes"),
    [
        ("4G", 4096),
        ("4GB", 4096),
        ("512M", 512),
        ("512mb", 512),
        ("2048", 2048),
        ("1T", 1048576),
        ("1536K", 2),
        ("1.5G", 1536),
        ("2GiB", 2048),
        (1024, 1024),
    ],
)
def test_legacy_memory_and_storage_map_to_megabytes(make_task, legacy, megabytes):
    value = f'"{legacy}"' if isinstance(legacy, str) else legacy
    toml = f"[environment]\nmemory = {value}\nstorage = {value}\n"
    cfg = load_task(make_task(toml=toml)).config.environment
    assert (cfg.memory_mb, cfg.storage_mb) == (megabytes, megabytes)
    assert "memory" not in (cfg.model_extra or {})


@pytest.mark.parametrize(("allow", "mode"), [("true", "public"), ("false", "no-network")])
def test_legacy_allow_internet_maps_to_network_mode(make_task, allow, mode):
    task = load_task(make_task(toml=f"[environment]\nallow_internet = {allow}\n"))
    assert task.config.environment.network_mode == mode
    assert task.warnings == []


def test_legacy_and_new_keys_that_agree_are_fine(make_task):
    toml = '[environment]\nmemory = "2G"\nmemory_mb = 2048\nallow_internet = true\nnetwork_mode = "public"\n'
    assert load_task(make_task(toml=toml)).config.environment.memory_mb == 2048


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        (
            '[environment]\nmemory = "4G"\nmemory_mb = 1024\n',
            "task.toml:environment.memory: 4096 MB disagrees with environment.memory_mb = "
            "1024; give only one of them",
        ),
        (
            '[environment]\nstorage = "1G"\nstorage_mb = 10\n',
            "task.toml:environment.storage: 1024 MB disagrees with environment.storage_mb = "
            "10; give only one of them",
        ),
        (
            '[environment]\nallow_internet = true\nnetwork_mode = "no-network"\n',
            "task.toml:environment.allow_internet: true disagrees with "
            "environment.network_mode = 'no-network'",
        ),
        (
            '[environment]\nmemory = "lots"\n',
            "task.toml:environment.memory: expected a size like '4G' or a number of MB, got 'lots'",
        ),
        (
            '[environment]\nallow_internet = "yes"\n',
            "task.toml:environment.allow_internet: expected true or false, got 'yes'",
        ),
    ],
)
def test_conflicting_or_bad_legacy_keys_are_errors(make_task, toml, expected):
    with pytest.raises(TaskLoadError) as info:
        load_task(make_task(toml=toml))
    assert expected in str(info.value).splitlines()


def test_syntax_error_reports_file_and_line(make_task):
    toml = '[task]\nname = "ok"\n\n[agent]\ntimeout_sec = = 5\n'
    with pytest.raises(TaskLoadError) as info:
        load_task(make_task(toml=toml))
    (line,) = str(info.value).splitlines()
    assert line.startswith("task.toml:5: syntax error: ")


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ('[agent]\ntimeout_sec = "abc"\n', "task.toml:agent.timeout_sec: expected a number, got 'abc'"),
        ('[environment]\ngpus = "two"\n', "task.toml:environment.gpus: expected a whole number, got 'two'"),
        (
            '[environment]\nnetwork_mode = "wifi"\n',
            "task.toml:environment.network_mode: expected one of 'no-network', 'public' or "
            "'allowlist', got 'wifi'",
        ),
        ("[environment]\nenv = { A = 1 }\n", "task.toml:environment.env.A: expected a string, got 1"),
        ('task = "x"\n', "task.toml:task: expected a table, got 'x'"),
        (
            "[verifier]\ntimeout_sec = 0\n",
            "task.toml:verifier.timeout_sec: must be a positive number, got 0.0",
        ),
        ("[environment]\ncpus = -1\n", "task.toml:environment.cpus: must be a positive number, got -1.0"),
    ],
)
def test_wrong_types_report_file_field_and_value(make_task, toml, expected):
    with pytest.raises(TaskLoadError) as info:
        load_task(make_task(toml=toml))
    assert expected in str(info.value).splitlines()
    assert info.value.task_name == "demo"


def test_every_type_error_is_reported_at_once(make_task):
    toml = '[agent]\ntimeout_sec = "abc"\n\n[verifier]\ntimeout_sec = "soon"\n'
    with pytest.raises(TaskLoadError) as info:
        load_task(make_task(toml=toml))
    fields = {p.field for p in info.value.errors}
    assert fields == {"agent.timeout_sec", "verifier.timeout_sec"}


def test_task_name_defaults_to_directory_name(make_task):
    assert load_task(make_task("dir-name", toml="[agent]\ntimeout_sec = 5\n")).name == "dir-name"
    assert load_task(make_task("other-dir", toml='[task]\nname = "given"\n')).name == "given"


def test_unusable_task_name_is_an_error(make_task):
    with pytest.raises(TaskLoadError, match=r"task.toml:task.name: '../up' is not a usable name"):
        load_task(make_task(toml='[task]\nname = "../up"\n'))


def test_missing_task_toml_uses_defaults_with_a_warning(make_task):
    task = load_task(make_task(toml=None))
    assert task.config.agent.timeout_sec == 600
    assert task.warnings == ["task.toml: missing; using the defaults"]


@pytest.mark.parametrize("bad", ["", "0", "-1G", "4X", "G", True])
def test_parse_size_rejects_non_sizes(bad):
    with pytest.raises(ValueError, match="expected a"):
        parse_size_mb(bad)
