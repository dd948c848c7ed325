"""`evsys run --temperature/--max-tokens/--max-turns`: generation settings for every agent that uses a model.

They become the agent kwargs of the same names (the loop agent's and the single-turn agent's own; a harness
hands them to its model proxy, which fills the requests that pass none and refuses the call past
`max_turns`). Agents that use no model (oracle, nop) do not take them: a job of only such agents is
refused."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from evsys.cli.checks import fail

if TYPE_CHECKING:
    from evsys.engine.config import JobConfig

Temperature = Annotated[
    float | None,
    typer.Option("--temperature", min=0.0, help="Sampling temperature for every model-using agent."),
]
MaxTokens = Annotated[
    int | None,
    typer.Option("--max-tokens", min=1, help="Most tokens per model call (harnesses: calls that set none)."),
]
MaxTurns = Annotated[
    int | None,
    typer.Option("--max-turns", min=1, help="Most model calls per trial (loop: turns; harnesses: calls)."),
]
FLAGS = {"temperature": "--temperature", "max_tokens": "--max-tokens", "max_turns": "--max-turns"}


def generation_kwargs(
    temperature: float | None, max_tokens: int | None, max_turns: int | None
) -> dict[str, Any]:
    """The agent kwargs the flags given set (the flags left out set nothing)."""
    values = {"temperature": temperature, "max_tokens": max_tokens, "max_turns": max_turns}
    return {key: value for key, value in values.items() if value is not None}


def apply_generation(config: JobConfig, generation: dict[str, Any]) -> JobConfig:
    """`config` with the generation kwargs in every model-using agent's kwargs (over --agent-kwarg's); a
    usage error when no agent of the job uses a model."""
    from evsys.agent.registry import uses_model

    if not generation:
        return config
    if not any(uses_model(agent.name) for agent in config.agents):
        flags = ", ".join(FLAGS[key] for key in generation)
        names = ", ".join(sorted({agent.name for agent in config.agents}))
        raise fail(
            f"{flags}: {names} use(s) no model (oracle runs the task's solution, nop does nothing); these "
            "flags are for agents that do (-a loop -m MODEL, a harness)"
        )
    agents = [
        agent.model_copy(update={"kwargs": {**agent.kwargs, **generation}})
        if uses_model(agent.name)
        else agent
        for agent in config.agents
    ]
    return config.model_copy(update={"agents": agents})


def once_without_model(config: JobConfig) -> JobConfig:
    """`config` with each agent that uses no model (oracle, nop) once, however many `-m` were given (each
    model makes every agent a spec of its own; for these the model changes nothing)."""
    from evsys.agent.registry import uses_model

    seen: set[str] = set()
    agents = []
    for agent in config.agents:
        key = agent.model_dump_json(exclude={"model"})
        if not uses_model(agent.name) and key in seen:
            continue
        seen.add(key)
        agents.append(agent)
    return config.model_copy(update={"agents": agents})
