"""The capture graph of one trial: its model calls linked by exact token prefix, one training row per path.

Every agent step that recorded token ids (a loop-agent turn, or a call a harness made through the recording
proxy) is a node. A node's parent is the earlier call whose prompt + completion is a token prefix of this
node's prompt (the longest such call; the latest on a tie). A node without a parent is a root: the first call,
a retry of a first call, a sub-agent with its own system prompt, or the conversation after a context
compaction rewrote the history. A node whose parent already has a child is a branch (a retried or
regenerated call, a fork).

Each path from a root to a leaf is one `TrainingSequence`: the root's prompt as `prompt_token_ids`, then for
each call on the path the tokens the harness inserted since the previous call (tool results, user turns,
chat markup: loss mask 0, logprob 0) followed by the call's completion (its own loss mask and sampling
logprobs). A completion shared by several paths (the calls before a branch) is learnt from once: in the
first path that holds it; later paths keep it as context (mask 0, its logprobs kept). Whatever opened a
sequence other than the first is kept as a `SequenceBreak` (which call, what kind, the closest earlier call
and how many tokens they share), so nothing of a run is thrown away and nothing is silently stitched.

`flatten_tokens` (evsys.trajectory.groups) keeps its first-path-until-the-break meaning for `run_rollouts`;
the graph is what the `sequences` and `openenv` exports and the viewer use."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from evsys.records import Step, Trajectory

BreakKind = Literal["retry", "branch", "new_root"]


class CallNode(BaseModel):
    """One recorded model call (an agent step with token ids) and its parent in the graph."""

    node: int = Field(description="0-based position among the trial's calls with token ids.")
    step_id: int
    call_index: int | None = Field(None, description="The proxy's call index, for harness runs.")
    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    logprobs: list[float]
    loss_mask: list[int]
    parent: int | None = Field(None, description="The node this call continues (None: a root).")
    weights_version: int | None = Field(
        None, description="The policy weights version that sampled this call (None: the model reports none)."
    )

    @property
    def end(self) -> list[int]:
        """The token sequence after this call: its prompt and its completion."""
        return self.prompt_token_ids + self.completion_token_ids


class SequenceBreak(BaseModel):
    """Why a call opened a new training sequence instead of continuing one."""

    node: int
    step_id: int
    call_index: int | None = None
    kind: BreakKind = Field(
        description="retry: the same prompt as an earlier call; branch: continues a call that was already "
        "continued; new_root: extends no earlier call (sub-agent, compaction, rewritten history)."
    )
    closest_node: int | None = Field(
        None,
        description="The earlier call whose prompt + completion shares the most leading tokens (None: none "
        "shares any).",
    )
    common_prefix_tokens: int = Field(0, description="How many leading tokens the two share.")


class TrainingSequence(BaseModel):
    """One root-to-leaf path as a training row; mask and logprobs align with `completion_token_ids`."""

    index: int
    nodes: list[int]
    step_ids: list[int]
    call_indices: list[int | None]
    prompt_token_ids: list[int]
    completion_token_ids: list[int] = Field(default_factory=list)
    loss_mask: list[int] = Field(default_factory=list)
    logprobs: list[float] = Field(default_factory=list)
    opened_by: SequenceBreak | None = Field(None, description="None for the trial's first sequence.")


class CaptureGraph(BaseModel):
    """A trial's calls, the sequences they form and the breaks between them."""

    nodes: list[CallNode] = Field(default_factory=list)
    sequences: list[TrainingSequence] = Field(default_factory=list)
    breaks: list[SequenceBreak] = Field(default_factory=list)


def _node(position: int, step: Step) -> CallNode | None:
    metrics = step.metrics
    if step.source != "agent" or metrics is None:
        return None
    prompt, completion = metrics.prompt_token_ids, metrics.completion_token_ids
    if prompt is None or completion is None:
        return None
    logprobs = metrics.logprobs if metrics.logprobs is not None else [0.0] * len(completion)
    mask = metrics.loss_mask if metrics.loss_mask is not None else [1] * len(completion)
    call_index = (step.model_extra or {}).get("proxy_call_index")
    return CallNode(
        node=position,
        step_id=step.step_id,
        call_index=call_index if isinstance(call_index, int) else None,
        prompt_token_ids=list(prompt),
        completion_token_ids=list(completion),
        logprobs=[float(x) for x in logprobs],
        loss_mask=[int(x) for x in mask],
        weights_version=metrics.weights_version,
    )


def _common_prefix(a: list[int], b: list[int]) -> int:
    limit = min(len(a), len(b))
    index = 0
    while index < limit and a[index] == b[index]:
        index += 1
    return index


def _parent(node: CallNode, earlier: list[CallNode]) -> int | None:
    """The earlier node with the longest prompt + completion that is a prefix of `node`'s prompt."""
    best: CallNode | None = None
    prompt = node.prompt_token_ids
    for candidate in earlier:
        end = candidate.end
        if len(end) <= len(prompt) and prompt[: len(end)] == end:
            if best is None or len(end) >= len(best.end):
                best = candidate
    return best.node if best is not None else None


def _break(node: CallNode, earlier: list[CallNode], kind: BreakKind) -> SequenceBreak:
    closest, shared = None, 0
    for candidate in earlier:  # the latest of the earlier calls sharing the most leading tokens, if any
        common = _common_prefix(candidate.end, node.prompt_token_ids)
        if common and common >= shared:
            closest, shared = candidate.node, common
    if any(c.prompt_token_ids == node.prompt_token_ids for c in earlier):
        kind = "retry"
    return SequenceBreak(
        node=node.node,
        step_id=node.step_id,
        call_index=node.call_index,
        kind=kind,
        closest_node=closest,
        common_prefix_tokens=shared,
    )


def _link(nodes: list[CallNode]) -> list[SequenceBreak]:
    """Set each node's parent; the breaks (every root but the first, every branch), in call order."""
    breaks: list[SequenceBreak] = []
    continued: set[int] = set()
    for position, node in enumerate(nodes):
        earlier = nodes[:position]
        node.parent = _parent(node, earlier)
        if node.parent is None and position > 0:
            breaks.append(_break(node, earlier, "new_root"))
        elif node.parent is not None and node.parent in continued:
            breaks.append(_break(node, earlier, "branch"))
        if node.parent is not None:
            continued.add(node.parent)
    return breaks


def _path(nodes: list[CallNode], leaf: CallNode) -> list[CallNode]:
    path = [leaf]
    while path[-1].parent is not None:
        path.append(nodes[path[-1].parent])
    return path[::-1]


def _sequence(index: int, path: list[CallNode], learnt: set[int]) -> TrainingSequence:
    """One row for `path`; completions of nodes in `learnt` become context (mask 0); the others are learnt."""
    root = path[0]
    seq = TrainingSequence(
        index=index,
        nodes=[n.node for n in path],
        step_ids=[n.step_id for n in path],
        call_indices=[n.call_index for n in path],
        prompt_token_ids=list(root.prompt_token_ids),
    )
    covered = len(root.prompt_token_ids)
    for node in path:
        context = node.prompt_token_ids[covered:]
        mask = [0] * len(node.completion_token_ids) if node.node in learnt else node.loss_mask
        seq.completion_token_ids += context + node.completion_token_ids
        seq.loss_mask += [0] * len(context) + list(mask)
        seq.logprobs += [0.0] * len(context) + list(node.logprobs)
        covered = len(node.end)
        learnt.add(node.node)
    return seq


def capture_graph(trajectory: Trajectory | None) -> CaptureGraph:
    """The capture graph of a trial's trajectory (empty when no step recorded token ids)."""
    steps = trajectory.steps if trajectory is not None else []
    nodes: list[CallNode] = []
    for step in steps:
        node = _node(len(nodes), step)
        if node is not None:
            nodes.append(node)
    breaks = _link(nodes)
    opened = {b.node: b for b in breaks}
    parents = {n.parent for n in nodes if n.parent is not None}
    leaves = [n for n in nodes if n.node not in parents]
    learnt: set[int] = set()
    sequences = []
    for index, leaf in enumerate(leaves):
        path = _path(nodes, leaf)
        seq = _sequence(index, path, learnt)
        seq.opened_by = next((opened[n.node] for n in reversed(path) if n.node in opened), None)
        sequences.append(seq)
    return CaptureGraph(nodes=nodes, sequences=sequences, breaks=breaks)
