"""The read model: one session as frozen, typed objects (issue 14 item 1).

`observatory.report.data.build` returns a `SessionView`; every reader (the
verdict policy, the HTML report, JUnit, the terminal summary, history
summaries, selftest) reads its attributes, and ``show --json`` /
``gate --json`` serialise the same objects through `to_plain`, so the
documented JSON shape is the shape of these classes, checked by mypy::

    {"schema_version": 1,  # SCHEMA_VERSION; JSON Schema: docs/show-json.schema.json
     "session": {"id", "started_at", "host", "gpu", "status", ..., "known"?: [ledger entries]},
     "probes": [{"name", "category", "hash", "prompt", "definition", "params"}],
     "arms": [{"name", "role", "status", "reason", "launch", "engine_version",
               "counters": {"drafts", "draft_tokens", "accepted", "accepted_per_pos"},  # the probe pass's
               ...its figures (acceptance, speed, vs_base, ...),
               "results": [{"probe", "prompt", "text", "token_ids", "finish_reason",
                            "verdicts": {GATE: {"verdict", "reason", "details"}}}]}],
     "channels": [{"name", "title", "catches", "probes", "arms": [...]}],
     "verdict": {"verdict": "PASS"|"WARN"|"FAIL"|"INVALID", "why", "exit_code",
                 "reasons": [{"level", "text", "arm", "probe", "gate", "code",
                              "known"?: {"id", "title", "link", "reproduction"}}]},  # level KNOWN, NOTE too
     "triages": [...as `triage --json` prints them],
     "depths": None | {"planned", "covered", "deployed_k", "deployed_arm", "deployed_measured"},
     "cross_engine": None | {"engines", "bases", "pairs", "acceptance", "note"}}  # observatory.judge.cross_engine

Arms are in run order, results in probe order. Parts that are free-form by
nature stay ``Mapping[str, Any]`` and say so: what an engine or a gate
stored (an arm's launch facts, a verdict's details, a result's usage), and
the figures' inner tables as `observatory.judge.figures` computes them.

Data flows one way: plan -> run -> store -> judge -> figures -> read model ->
renderers. This module imports nothing from the observatory: readers import
it, never the reverse.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from observatory.model.vocabulary import EXIT, FAIL, INVALID, WARN

# field metadata: the field's own keys go into its parent's JSON object, in place
SPREAD = {"json": "spread"}
# field metadata: the field always holds its default (the JSON Schema says so with "const")
CONST = {"json": "const"}
# field metadata: the key is written only when the field is not None (an optional property of its object)
OPTIONAL = {"json": "optional"}
# field metadata: read by the renderers, never printed (its JSON twin is elsewhere, or it would change the shape)
NOT_PRINTED = {"json": "omit"}

# The version of the JSON shape (``show --json``'s top-level "schema_version"). Bump it when a key is removed,
# renamed or changes type, and regenerate docs/show-json.schema.json (observatory.model.json_schema).
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class SessionFacts:
    """Where, when and how a session ran (``show --json``'s ``"session"``)."""

    id: int
    started_at: str | None
    finished_at: str | None
    status: str
    reason: str | None
    host: str | None
    gpu: str | None
    machine: Mapping[str, Any] | None  # free-form: what observatory.engines.machine found (cpu, gpus, driver, ...)
    observatory_version: str | None
    model: str | None
    image: str | None
    suite: str | None
    command: list[str] | None
    options: Mapping[str, Any] | None  # free-form: the stored plan and options (fail_on, channels, ...)
    # the known-findings ledger in effect (docs/known.md: each entry's stored keys), written only when stored
    known: tuple[Mapping[str, Any], ...] | None = field(default=None, metadata=OPTIONAL)


@dataclass(frozen=True)
class ProbeView:
    """One probe of the session (channel probes excluded)."""

    name: str
    category: str
    hash: str
    prompt: Any  # the messages list of a chat probe, or the prompt text of a completion probe
    definition: Mapping[str, Any]  # free-form: the probe file's entry as stored (Probe.to_dict)
    params: Mapping[str, Any] | None  # free-form: the request parameters sent


@dataclass(frozen=True)
class VerdictView:
    """One gate's verdict on a result, an arm or a channel."""

    verdict: str
    reason: str | None
    details: Mapping[str, Any] | None  # free-form: what the gate stored to explain itself
    gate_version: str | None


@dataclass(frozen=True)
class ResultView:
    """One streamed result of one probe on one arm, with its verdicts by gate."""

    probe: str
    category: str
    prompt: Any  # as ProbeView.prompt
    probe_hash: str
    params: Mapping[str, Any] | None
    ok: bool
    error: str | None
    text: str | None
    content: str | None
    reasoning: str | None
    preview: str
    token_ids: list[int] | None
    token_texts: list[str] | None
    top_logprobs: list[Any] | None  # per position: [[token id, logprob], ...]
    tool_calls: list[Any] | None  # free-form: the tool calls as the server returned them
    finish_reason: str | None
    usage: Mapping[str, Any] | None  # free-form: the server's usage object
    ttft_ms: float | None
    duration_ms: float | None
    chunks: list[Any] | None  # the stream's chunks as stored (observatory.session.measure)
    counters_delta: Mapping[str, Any] | None  # the spec counters' movement around this request
    verdict: str | None  # the cell verdict: the worst of the verdicts of gates without a channel suffix
    verdicts: Mapping[str, VerdictView]


@dataclass(frozen=True)
class Counters:
    """An arm's spec counters over its streamed probe pass (the correctness pass): drafts are verify steps,
    accepted are tokens. Alpha and tau count every pass: the arm's ``acceptance`` (its ``from`` gives each
    pass's counters). None is not reported (or never read), never 0."""

    drafts: int | None = None
    draft_tokens: int | None = None
    accepted: int | None = None
    accepted_per_pos: list[int] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict, metadata=SPREAD)  # other stored keys (problem, ...)


@dataclass(frozen=True)
class ValidityFlag:
    """One validity code of an arm (INVALID, CONFOUNDED, LOW_N, ...) and its detail; ``known``: the
    known-findings entry that covers it (id, title, link, reproduction; issue 46), written only when one does."""

    code: str
    detail: str | None
    known: Mapping[str, Any] | None = field(default=None, metadata=OPTIONAL)


FIGURE_KEYS = ("acceptance", "speed", "by_concurrency", "stream_tau", "stream_counter_tau", "vs_base",
               "performance", "noise_floor", "steady_state", "gpu_clocks", "cuda_graphs")


@dataclass(frozen=True)
class ArmFigures:
    """An arm's figures as `observatory.judge.figures` stored them; a figure not computed is None.

    Each figure's inner table is free-form (``Mapping``): its keys are
    documented in observatory/judge/figures.py. ``stored`` lists the figures the
    arm has, in stored order: ``show --json`` writes exactly those (an arm
    never evaluated has none; a base arm has no ``vs_base``).
    """

    acceptance: Mapping[str, Any] | None = None
    speed: Mapping[str, Any] | None = None
    by_concurrency: Mapping[str, Any] | None = None
    stream_tau: Mapping[str, Any] | None = None  # {"tau", "se", "chunks"}: observatory.judge.speed.stream_tau
    stream_counter_tau: float | None = None
    vs_base: Mapping[str, Any] | None = None
    performance: list[Mapping[str, Any]] | None = None
    noise_floor: Mapping[str, Any] | None = None
    # issue 29 items 3-4: the warm-up left out of S (observatory.judge.steady_state), the GPU clocks beside each
    # timed block (observatory.engines.gpu_clocks), the timed steps against the captured CUDA graphs
    # (observatory.judge.graph_coverage)
    steady_state: Mapping[str, Any] | None = None
    gpu_clocks: Mapping[str, Any] | None = None
    cuda_graphs: Mapping[str, Any] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)  # stored figures this version does not know
    stored: tuple[str, ...] = ()

    @classmethod
    def from_stored(cls, fig: Mapping[str, Any] | None) -> ArmFigures:
        """From an arm row's ``figures`` JSON (None: no figures yet)."""
        fig = fig or {}
        known = {k: fig[k] for k in FIGURE_KEYS if k in fig}
        return cls(**known, extra={k: v for k, v in fig.items() if k not in FIGURE_KEYS}, stored=tuple(fig))

    def items(self) -> list[tuple[str, Any]]:
        """The stored figures as (key, value), in stored order."""
        return [(k, getattr(self, k) if k in FIGURE_KEYS else self.extra[k]) for k in self.stored]


@dataclass(frozen=True)
class ArmView:
    """One arm: its launch, status, counters, figures and results in probe order."""

    name: str
    role: str | None
    position: int
    status: str
    reason: str | None
    launch: Mapping[str, Any]  # free-form: the launch facts as stored (argv, env, url, image, fault, ...)
    speculative_config: Mapping[str, Any] | None
    is_spec: bool
    copy_of: str | None
    engine_version: str | None
    model: str | None
    log_path: str | None
    log_tail: str | None
    started_at: str | None
    ready_at: str | None
    finished_at: str | None
    counters: Counters
    validity: tuple[ValidityFlag, ...]
    arm_verdicts: Mapping[str, VerdictView]
    channel_verdicts: Mapping[str, VerdictView]
    figures: ArmFigures = field(metadata=SPREAD)
    results: tuple[ResultView, ...]
    # the engine it ran on, stored with it (its launch facts' "engine" is what show --json prints of it)
    engine: str | None = field(default=None, metadata=NOT_PRINTED)


@dataclass(frozen=True)
class ChannelArm:
    """One arm's verdicts in one field channel."""

    arm: str
    role: str | None
    status: str
    verdicts: Mapping[str, VerdictView]
    seconds: float | None = None  # the summed durations of this arm's requests in the channel (None: none timed)


@dataclass(frozen=True)
class ChannelSummary:
    """A field channel the session ran: what it catches, its probe count and every arm's verdicts."""

    name: str
    title: str
    catches: str
    probes: int
    arms: tuple[ChannelArm, ...]


@dataclass(frozen=True)
class Reason:
    """One reason behind a session verdict, with what it is about; ``known``: for a KNOWN reason (and a note
    about a known finding), the ledger entry's id, title, link and reproduction, written only then (issue 46)."""

    level: str
    text: str
    arm: str | None = None
    probe: str | None = None
    gate: str | None = None
    code: str | None = None
    known: Mapping[str, Any] | None = field(default=None, metadata=OPTIONAL)


@dataclass(frozen=True)
class SessionVerdict:
    """PASS, WARN, FAIL or INVALID, why, the gate's exit status, and every reason (worst first)."""

    verdict: str
    why: str
    exit_code: int = field(init=False)
    reasons: tuple[Reason, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "exit_code", EXIT[self.verdict])

    def texts(self, levels: tuple[str, ...] = (FAIL, INVALID, WARN)) -> list[str]:
        """The reasons of LEVELS as lines."""
        return [r.text for r in self.reasons if r.level in levels]


@dataclass(frozen=True)
class Depths:
    """The speculation depths k a session planned and measured, and the deployment's (``show --json``'s
    ``"depths"``; observatory.session.depths)."""

    planned: tuple[int, ...]  # every spec arm's k
    covered: tuple[int, ...]  # the k of every spec arm measured to its end
    deployed_k: int | None  # the deployment's k (--deployed-spec, or an arms-file arm marked deployed); None: not given
    deployed_arm: str | None  # the arm that ran exactly the deployed config
    deployed_measured: bool | None  # whether that arm was measured to its end

    def summary(self) -> str:
        """One line: the depths covered and the deployed one."""
        covered = ", ".join(str(k) for k in self.covered) or "none"
        line = f"speculation depths covered: k = {covered}"
        missed = [k for k in self.planned if k not in self.covered]
        if missed:
            line += f" (planned but not measured to the end: k = {', '.join(str(k) for k in missed)})"
        if self.deployed_k is None:
            return line + "; the deployed k is not known (--deployed-spec): a fault at another depth would not show"
        measured = "measured" if self.deployed_measured else "NOT measured to its end"
        return line + f"; deployed k = {self.deployed_k} (arm {self.deployed_arm}, {measured})"


@dataclass(frozen=True)
class SessionView:
    """One session, whole: what every reader reads and ``show --json`` prints."""

    schema_version: int = field(default=SCHEMA_VERSION, init=False, metadata=CONST)
    session: SessionFacts
    probes: tuple[ProbeView, ...]
    arms: tuple[ArmView, ...]
    channels: tuple[ChannelSummary, ...]
    verdict: SessionVerdict
    triages: tuple[Mapping[str, Any], ...]  # as `triage --json` prints them (observatory.triage.store)
    # free-form: observatory.judge.cross_engine's comparison of a session on two engines (None on one engine);
    # tokenizer alignment, base-vs-base diffs, acceptance side by side; never part of the verdict
    cross_engine: Mapping[str, Any] | None = None
    # the speculation depths covered (None: a session without spec arms)
    depths: Depths | None = None


def to_plain(value: Any) -> Any:
    """VALUE as plain JSON-able data: views become dicts in field order, tuples lists.

    The one serialisation of the read model. A field marked `SPREAD` puts its
    own keys into the parent object in its place (an arm's figures, extra
    counters), so the objects print in the documented shape; one marked
    `OPTIONAL` is left out while it is None.
    """
    if isinstance(value, ArmFigures):
        return {k: to_plain(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            if f.metadata.get("json") == "omit":
                continue
            v = to_plain(getattr(value, f.name))
            if f.metadata.get("json") == "optional" and v is None:
                continue
            if f.metadata.get("json") == "spread":
                out.update(v)
            else:
                out[f.name] = v
        return out
    if isinstance(value, Mapping):
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    return value
