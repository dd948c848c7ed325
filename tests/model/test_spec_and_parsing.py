"""The model-string grammar, tool-call parsing and the tool-aware chat template (no model needed)."""

from __future__ import annotations

import json

import pytest

from evsys.model import ModelSpec, RetryableModelError, RetryPolicy, create_model_client, model_provider_names
from evsys.model.render import parse_tool_calls


@pytest.mark.parametrize(
    ("text", "provider", "model"),
    [
        ("local", "local", ""),
        ("local:/models/qwen", "local", "/models/qwen"),
        ("openai:gpt-4.1", "openai", "gpt-4.1"),
        ("vllm:Qwen/Qwen3-8B", "vllm", "Qwen/Qwen3-8B"),
        ("sglang:meta-llama/Llama-3.1-8B", "sglang", "meta-llama/Llama-3.1-8B"),
        ("llamacpp:smol", "llamacpp", "smol"),
        ("litellm:anthropic/claude-sonnet-4-5", "litellm", "anthropic/claude-sonnet-4-5"),
    ],
)
def test_model_strings_parse(text, provider, model):
    """Every documented form parses to its provider and model, and prints back the same."""
    spec = ModelSpec.parse(text)
    assert (spec.provider, spec.model) == (provider, model)
    assert str(spec) == text


def test_unknown_provider_lists_the_valid_ones():
    """A typo in the provider names the valid providers."""
    with pytest.raises(ValueError, match=r"unknown model provider 'vlm' \(did you mean 'vllm'\?\)") as info:
        ModelSpec.parse("vlm:Qwen/Qwen3-8B")
    for provider in model_provider_names():
        assert provider in str(info.value)
    with pytest.raises(ValueError, match="names no model"):
        ModelSpec.parse("openai")
    with pytest.raises(ValueError, match="unknown model provider"):
        create_model_client("hf:gpt2")


def test_base_urls_resolve(monkeypatch):
    """--base-url wins, then EVSYS_BASE_URL, then the provider default."""
    monkeypatch.delenv("EVSYS_BASE_URL", raising=False)
    assert ModelSpec.parse("vllm:m").resolved_base_url() == "http://localhost:8000/v1"
    assert ModelSpec.parse("openai:gpt-4.1").resolved_base_url() is None
    assert ModelSpec.parse("vllm:m", base_url="http://gpu:9/v1").resolved_base_url() == "http://gpu:9/v1"
    monkeypatch.setenv("EVSYS_BASE_URL", "http://env:1/v1")
    assert ModelSpec.parse("sglang:m").resolved_base_url() == "http://env:1/v1"


def test_litellm_missing_names_the_extra():
    """Without LiteLLM installed, the error tells the user which extra to install."""
    try:
        import litellm  # noqa: F401
    except ImportError:
        from evsys.model import ModelError

        with pytest.raises(ModelError, match=r"evsys\[litellm\]"):
            create_model_client("litellm:anthropic/claude-sonnet-4-5")
    else:
        client = create_model_client("litellm:anthropic/claude-sonnet-4-5")
        assert client.model == "anthropic/claude-sonnet-4-5"


def test_retry_delay_grows_and_honours_retry_after():
    """Backoff doubles up to the cap; Retry-After raises the wait but never beyond the cap."""
    policy = RetryPolicy(base_delay_s=0.5, max_delay_s=4.0, jitter=0.0)
    plain = RetryableModelError("x")
    assert [policy.delay_for(n, plain) for n in (1, 2, 3, 4, 5)] == [0.5, 1.0, 2.0, 4.0, 4.0]
    assert policy.delay_for(1, RetryableModelError("x", retry_after_s=3)) == 3.0
    assert policy.delay_for(1, RetryableModelError("x", retry_after_s=60)) == 4.0
    jittered = RetryPolicy(base_delay_s=1.0, jitter=0.5)
    assert all(1.0 <= jittered.delay_for(1, plain) <= 1.5 for _ in range(50))


def test_well_formed_tool_calls_parse():
    """Content before the first call is kept; several calls are returned in order with parsed arguments."""
    text = 'Let me look.\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>\n'
    text += '<tool_call>{"name": "read_file", "arguments": "{\\"path\\": \\"/a\\"}"}</tool_call>'
    content, calls = parse_tool_calls(text)
    assert content == "Let me look."
    assert [c.function_name for c in calls] == ["bash", "read_file"]
    assert calls[0].arguments == {"command": "ls"} and json.loads(calls[0].raw_arguments) == {"command": "ls"}
    assert calls[1].arguments == {"path": "/a"}
    assert all(c.parse_error is None for c in calls) and calls[0].tool_call_id != calls[1].tool_call_id


@pytest.mark.parametrize(
    ("body", "name", "error"),
    [
        ('{"name": "bash", "arguments": {"command": "ls"', "bash", "not valid JSON"),
        ('["bash"]', "", 'with a "name" string'),
        ('{"arguments": {}}', "", 'with a "name" string'),
        ('{"name": "bash", "arguments": [1, 2]}', "bash", "must be a JSON object"),
        ('{"name": "bash", "arguments": "{not json"}', "bash", "not valid JSON"),
    ],
)
def test_malformed_tool_calls_carry_a_parse_error(body, name, error):
    """Broken calls never raise: each becomes a ToolCall with the raw text and a readable parse_error."""
    content, calls = parse_tool_calls(f"<tool_call>{body}</tool_call>")
    assert content == ""
    assert len(calls) == 1
    assert calls[0].function_name == name and calls[0].arguments == {}
    assert error in calls[0].parse_error


def test_unterminated_tool_call_is_still_reported():
    """A call cut off by max_tokens is returned with a parse error rather than dropped."""
    _, calls = parse_tool_calls('<tool_call>\n{"name": "bash", "argum')
    assert len(calls) == 1 and calls[0].function_name == "bash" and calls[0].parse_error


def test_hermes_template_renders_tools_calls_and_results():
    """Tools go into the system turn; assistant calls and tool results round-trip in Hermes form."""
    from transformers import PreTrainedTokenizerFast

    from evsys.model.render.chat_template import HERMES_CHATML_TEMPLATE, render_prompt
    from evsys.testing.tiny_model import _empty_tokenizer

    tokenizer = PreTrainedTokenizerFast(tokenizer_object=_empty_tokenizer())
    tool = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "List files."}]},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"a": 1}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "x.txt"},
        {"role": "tool", "tool_call_id": "c2", "content": "y.txt"},
    ]
    text = render_prompt(tokenizer, HERMES_CHATML_TEMPLATE, messages, [tool])
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools")
    assert json.dumps(tool) in text
    assert "<|im_start|>user\nList files.<|im_end|>\n" in text
    assert (
        '<|im_start|>assistant\n<tool_call>\n{"name": "bash", "arguments": {"a": 1}}\n</tool_call><|im_end|>'
        in text
    )
    assert text.count("<|im_start|>user\n<tool_response>") == 1
    assert (
        "<tool_response>\nx.txt\n</tool_response>\n<tool_response>\ny.txt\n</tool_response><|im_end|>" in text
    )
    assert text.endswith("<|im_start|>assistant\n")
