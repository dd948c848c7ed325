"""Model providers by registry: registration in code, `evsys.models` entry points, unknown names, and a
`ModelSpec` that rebuilds the same client after JSON or pickle (what a worker process does)."""

from __future__ import annotations

import pickle
import sys
import textwrap
from pathlib import Path

import pytest

from evsys.model import (
    Completion,
    ModelSpec,
    ProviderDefaults,
    create_model_client,
    model_provider_names,
    register_model_provider,
)
from evsys.model.registry import MODEL_PROVIDERS
from evsys.util.registry import PluginLoadError


class EchoClient:
    """A ModelClient that answers with its settings, so a test can see what the factory was given."""

    def __init__(self, spec: ModelSpec, **options: object) -> None:
        self.model = spec.model
        self.spec = spec
        self.options = options

    async def complete(self, messages, *, tools=None, params=None) -> Completion:
        return Completion(text=f"{self.spec.resolved_base_url()} {sorted(self.options.items())}")

    async def aclose(self) -> None:
        return None


@pytest.fixture
def echo_provider():
    register_model_provider(
        "echo", EchoClient, ProviderDefaults(base_url="http://echo:1/v1", options={"depth": 1, "width": 2})
    )
    yield "echo"
    MODEL_PROVIDERS.unregister("echo")


async def test_a_provider_registered_in_code_builds_clients_with_merged_options(echo_provider):
    """One registration makes `echo:<model>` a valid model string; options merge defaults < spec < call."""
    assert "echo" in model_provider_names()
    client = create_model_client("echo:m1", width=5)
    assert isinstance(client, EchoClient) and client.model == "m1"
    assert client.options == {"depth": 1, "width": 5}
    spec = ModelSpec.parse("echo:m1", options={"depth": 3})
    assert create_model_client(spec).options == {"depth": 3, "width": 2}
    done = await create_model_client(spec).complete([{"role": "user", "content": "hi"}])
    assert done.text.startswith("http://echo:1/v1")


def test_a_spec_rebuilds_the_same_client_after_json_and_pickle(echo_provider):
    """A worker gets the spec as JSON or a pickle and builds a client with the same settings."""
    spec = ModelSpec.parse("echo:m2", base_url="http://gpu:9/v1", options={"depth": 7})
    for copy in (ModelSpec.model_validate_json(spec.model_dump_json()), pickle.loads(pickle.dumps(spec))):
        assert copy == spec
        rebuilt = create_model_client(copy)
        assert (rebuilt.model, rebuilt.options, rebuilt.spec.resolved_base_url()) == (
            "m2",
            {"depth": 7, "width": 2},
            "http://gpu:9/v1",
        )


def test_registering_a_taken_name_needs_replace(echo_provider):
    """Two packages cannot silently take the same provider name."""
    with pytest.raises(ValueError, match="'echo' is already registered"):
        register_model_provider("echo", EchoClient)
    register_model_provider("echo", EchoClient, replace=True)
    assert create_model_client("echo:x").options == {}


def test_unknown_provider_lists_providers_and_suggests_the_closest():
    """A typo names what exists and what was probably meant, from the string and from a deserialised spec."""
    with pytest.raises(
        ValueError, match=r"unknown model provider 'sglng' \(did you mean 'sglang'\?\)"
    ) as info:
        create_model_client("sglng:m")
    assert "available: " in str(info.value) and "local" in str(info.value)
    with pytest.raises(ValueError, match="unknown model provider 'vlm'"):
        ModelSpec.model_validate({"provider": "vlm", "model": "m"})
    with pytest.raises(ValueError, match="names no model"):
        ModelSpec.parse("vllm")
    assert str(ModelSpec.parse("local")) == "local"  # the one provider that has a default model


def _install_plugin(root: Path, dist: str, module: str, entry_points: str, source: str) -> None:
    """A real installed distribution (dist-info with entry_points.txt) and its module, under `root`."""
    info = root / f"{dist}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))
    (root / f"{module}.py").write_text(textwrap.dedent(source))


@pytest.fixture
def plugin_path(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    MODEL_PROVIDERS.refresh()
    yield tmp_path
    for name in ("toy", "toybare", "toybroken"):
        MODEL_PROVIDERS.unregister(name)
    for module in ("evsys_toy_models",):
        sys.modules.pop(module, None)
    monkeypatch.undo()
    MODEL_PROVIDERS.refresh()


def test_entry_point_providers_load_lazily_and_build_clients(plugin_path):
    """A package declaring `evsys.models` entry points adds providers without evsys importing it first;
    a broken entry point fails with a message naming it, only when it is used."""
    _install_plugin(
        plugin_path,
        "evsys-toy-models",
        "evsys_toy_models",
        """
        [evsys.models]
        toy = evsys_toy_models:PROVIDER
        toybare = evsys_toy_models:bare_factory
        toybroken = evsys_toy_models:MISSING
        """,
        """
        from evsys.model import ModelProvider, ProviderDefaults

        class ToyClient:
            def __init__(self, spec, **options):
                self.model, self.options = spec.model, options
            async def complete(self, messages, *, tools=None, params=None): ...
            async def aclose(self): ...

        def bare_factory(spec, **options):
            return ToyClient(spec, **options)

        PROVIDER = ModelProvider("toy", ToyClient, ProviderDefaults(requires_model=False, options={"k": 1}))
        """,
    )
    names = model_provider_names()
    assert {"toy", "toybare", "toybroken", "vllm"} <= set(names)
    assert "evsys_toy_models" not in sys.modules  # listing names imports nothing
    client = create_model_client("toy")
    assert (type(client).__name__, client.options) == ("ToyClient", {"k": 1})
    assert create_model_client("toybare:m").model == "m"
    with pytest.raises(PluginLoadError, match=r"'toybroken' from 'evsys_toy_models:MISSING'"):
        create_model_client("toybroken:m")


def test_cli_lists_providers_with_their_defaults(echo_provider):
    """`evsys model providers` shows the built-ins and a newly registered one with its default endpoint."""
    from typer.testing import CliRunner

    from evsys.cli.main import app

    result = CliRunner().invoke(app, ["model", "providers"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    rows = {line.split()[1]: line for line in result.output.splitlines() if line.startswith("│")}
    assert {"local", "openai", "vllm", "sglang", "llamacpp", "litellm", "echo"} <= set(rows)
    assert "http://localhost:8000/v1" in rows["vllm"] and "http://echo:1/v1" in rows["echo"]
