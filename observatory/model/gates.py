"""Gate contract and registry.

A gate is a plain function in a file under `gates/`, marked with the `@gate`
decorator, loaded by path (never through `sys.path`), and registered by name.
There are three kinds, told apart by `kind=` and checked against the
function's parameter names when the gate registers:

- ``"result"``: ``check(output: Output, probe: Probe) -> GateResult`` judges one
  output of one arm.
- ``"pair"``: ``check(spec: Output, base: Output, probe: Probe) -> GateResult``
  judges a spec arm's output against the base arm's output of the same probe.
- ``"arm"``: ``check(outputs: list[tuple[Probe, Output]]) -> GateResult``
  judges all outputs of one arm together (e.g. identical text for different
  prompts means the prompt did not take effect).

A gate returns PASS, WARN, FAIL or SKIP (not applicable to this probe), a
one-line reason and a JSON-able ``details`` dict. Gates never see ORM rows:
only the dataclasses below and `observatory.model.probes.Probe`.

Metadata, given to ``@gate`` and read by the judge, the verdict policy and
the report (no reader checks a gate by name):

- ``correctness=True``: a FAIL on the *base* arm makes the probe
  NOT_DISCRIMINATING for the other arms (docs/design.md section 2, mistake 1);
- ``applies`` (result gates): ``"all"`` runs on every probe (the default,
  so a gate dropped into ``--gates-dir`` runs without editing the suite),
  ``"named"`` only on probes whose ``gates`` list names it;
- ``invalidates=True`` (arm gates): a FAIL means the arm's measurements
  cannot be trusted (INVALID), not that speculation broke the output;
- ``sequences=True`` (pair gates): the gate compares whole generated token
  sequences. The judge gives it only outputs whose token ids are complete
  (falling back to comparing texts, where a difference is a FAIL whatever
  the ids), and also runs it on the arm's non-streamed and in-batch outputs
  against its own streamed one (``NAME:nonstream``, ``NAME:batch``) and on
  every timed output per concurrency level (``NAME:cN``).

Built-in gates register exactly as user gates do.

A gate file may also mark one function with ``@offline("NAME")``: it maps one
JSON object (a line of ``observatory gates check NAME --input FILE.jsonl``) to
one JSON verdict object.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from observatory.model.errors import ObservatoryError
from observatory.model.paths import GATES_DIR
from observatory.model.plugins import GATES, discover
from observatory.model.vocabulary import FAIL, PASS, SKIP, WARN

if TYPE_CHECKING:  # pragma: no cover
    pass

__all__ = [
    "FAIL",
    "MAX_JUDGED_CHARS",
    "NOT_JUDGED",
    "PASS",
    "SKIP",
    "WARN",
    "Gate",
    "GateRegistry",
    "GateResult",
    "Output",
    "default_registry",
    "gate",
    "load_gates",
    "offline",
    "registry_for",
]

VERDICTS = (PASS, WARN, FAIL, SKIP)
# A details key: the gate could not judge this output (a regex past its time limit); the judge stores
# the verdict as UNJUDGED (docs/design.md 3.3), never as the gate's PASS/WARN.
NOT_JUDGED = "not_judged"
# Gates see at most this many characters of an output's text, content and reasoning (each), so every gate
# is bounded in time and memory on any output: a hostile server can send megabytes in one token. The
# longest real output (max_tokens 4096 of a few characters each) is far below it.
MAX_JUDGED_CHARS = 200_000

_NAME = re.compile(r"[A-Za-z0-9_\-]+")
_SIGNATURES = {
    "result": ("output", "probe"),
    "pair": ("spec", "base", "probe"),
    "arm": ("outputs",),
}


@dataclass
class Output:
    """One generated output, as gates see it (plain data, no ORM)."""

    text: str
    token_ids: list[int] = field(default_factory=list)
    # Per generated position, the engine's top-k alternatives, best first:
    # [[(token_id, logprob), ...], ...]; aligned with token_ids.
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)
    # Per generated position, the decoded text of that token (for display).
    token_texts: list[str] | None = None
    finish_reason: str | None = None
    # OpenAI-shaped parsed tool calls of a chat response:
    # [{"id": ..., "type": "function", "function": {"name": ..., "arguments": "<json>"}}]
    tool_calls: list[dict[str, Any]] | None = None
    # The chat message content (None when the parser moved everything into
    # tool_calls); for completions, the same as text.
    content: str | None = None
    # The reasoning text a reasoning parser split off (vLLM's
    # ``reasoning_content``); None when the engine sent none.
    reasoning: str | None = None
    # Per generated position, the logprob the engine gave the token it emitted
    # (None where it was not finite); empty when none was recorded.
    logprobs: list[float | None] = field(default_factory=list)
    # vLLM's stop_reason: the stop string or stop token id that ended the answer.
    stop_reason: str | int | None = None
    # The answer's usage object as the server sent it (None: not recorded).
    usage: dict[str, Any] | None = None
    # How far the engine's own generated-token counter (vLLM
    # ``vllm:generation_tokens_total``) moved around this request; None where
    # it was not read (a request not measured alone, another engine).
    generated: int | None = None
    # On the reference (base) output of a pair: the largest logprob difference
    # the session's A/A copy showed against base on identical tokens (None: no
    # A/A copy judged). The per-field comparison takes its tolerance from it.
    aa_logprob_spread: float | None = None
    # On the reference (base) output of a pair: the dtype base's engine serves in
    # (`observatory.model.numerics.served_dtype`; None: unknown). The per-field
    # comparison takes its numerics bounds from it (`observatory.model.numerics.bounds_for`).
    served_dtype: str | None = None
    # ... and the platform it serves on ("cuda", `observatory.model.numerics.served_platform`; None: the CPU or
    # unknown): float32 rounds differently on CUDA (docs/design.md 3.7).
    served_platform: str | None = None
    # False where the engine's stream withholds ids by design (no logprobs for tokens accepted from a draft:
    # its adapter's ``streams_drafted_ids``): a streamed answer's ids then fall short of its usage and that says
    # nothing.
    streams_every_id: bool = True
    # False where the engine returns no logprobs for tokens accepted from a draft (the entry's logprob a
    # placeholder 0.0, no top-k: its adapter in observatory.engines, docs/engines.md): this answer's logprobs are
    # not comparable.
    drafted_logprobs: bool = True
    # False where the engine's stream omits the end token's logprobs entry while usage counts it (a known engine
    # bug: its adapter's ``streams_end_token``, docs/engines.md): one id short of usage on a stream that stopped
    # says nothing new.
    streams_end_token: bool = True
    # On a spec arm's output: how many prompt tokens its prefix-cache hits fall short of base's by the engine's
    # design (vLLM recomputes the last matched block for drafters that read the target's hidden states: blocks x
    # the reported block size, `observatory.engines.adapter.recomputed_prefix_blocks`), and why; 0 elsewhere.
    cached_tokens_short: int = 0
    cached_tokens_short_why: str = ""


@dataclass
class GateResult:
    """A gate's verdict on one output, one pair, or one arm."""

    verdict: str
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"verdict": self.verdict, "reason": self.reason, "details": self.details}


@dataclass(frozen=True)
class Gate:
    """A registered gate."""

    name: str
    description: str
    kind: str
    check: Callable[..., GateResult]
    correctness: bool
    path: str
    version: str
    offline: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    applies: str = "all"
    invalidates: bool = False
    sequences: bool = False

    @property
    def purpose(self) -> str:
        """What a FAIL of this gate means: "correctness", "validity" or "diagnostic"."""
        if self.invalidates:
            return "validity"
        return "correctness" if self.correctness or self.kind == "pair" else "diagnostic"

    def runs_on(self, probe: Any) -> bool:
        """Whether this result gate judges PROBE's outputs."""
        return self.applies == "all" or self.name in getattr(probe, "gates", ())


def gate(
    name: str,
    description: str,
    kind: str = "result",
    correctness: bool = False,
    applies: str = "all",
    invalidates: bool = False,
    sequences: bool = False,
) -> Callable[[Callable[..., GateResult]], Callable[..., GateResult]]:
    """Mark a function as a gate; `load_gates` registers it (see the module docstring for the metadata)."""

    def mark(fn: Callable[..., GateResult]) -> Callable[..., GateResult]:
        fn.__gate__ = {  # type: ignore[attr-defined]
            "name": name,
            "description": description,
            "kind": kind,
            "correctness": correctness,
            "applies": applies,
            "invalidates": invalidates,
            "sequences": sequences,
        }
        return fn

    return mark


def offline(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a function as the JSONL adapter of gate NAME."""

    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.__gate_offline__ = name  # type: ignore[attr-defined]
        return fn

    return mark


class GateRegistry:
    """Gates by name; rejects duplicates and bad signatures when they register."""

    def __init__(self) -> None:
        self._gates: dict[str, Gate] = {}

    def register(self, g: Gate) -> None:
        """Add a gate, validating its name, kind and signature."""
        if g.name in self._gates:
            other = self._gates[g.name]
            raise ObservatoryError(
                f"Gate {g.name!r} in {g.path} is already registered by {other.path}; "
                "rename one of them."
            )
        if g.kind not in _SIGNATURES:
            raise ObservatoryError(
                f"Gate {g.name!r} in {g.path} has kind {g.kind!r}; "
                f"use one of {sorted(_SIGNATURES)}."
            )
        if not _NAME.fullmatch(g.name):
            raise ObservatoryError(
                f"Gate {g.name!r} in {g.path}: a gate name is letters, digits, '_' and '-' "
                "(':' is reserved for the judge's variants such as token_diff:batch)."
            )
        if g.applies not in ("all", "named"):
            raise ObservatoryError(f"Gate {g.name!r} in {g.path}: applies must be 'all' or 'named', got {g.applies!r}.")
        if g.invalidates and g.kind != "arm":
            raise ObservatoryError(f"Gate {g.name!r} in {g.path}: only arm gates can invalidate an arm.")
        if g.sequences and g.kind != "pair":
            raise ObservatoryError(f"Gate {g.name!r} in {g.path}: sequences=True is for pair gates.")
        params = tuple(inspect.signature(g.check).parameters)
        want = _SIGNATURES[g.kind]
        if params != want:
            raise ObservatoryError(
                f"Gate {g.name!r} in {g.path} ({g.kind} gate) takes arguments {params}; "
                f"a {g.kind} gate must take {want}."
            )
        self._gates[g.name] = g

    def get(self, name: str) -> Gate:
        """The gate NAME, or an error listing the known ones."""
        try:
            return self._gates[name]
        except KeyError:
            raise ObservatoryError(
                f"No gate named {name!r}. Known gates: {', '.join(sorted(self._gates))}. "
                "Run `observatory gates list` to see them."
            ) from None

    def __contains__(self, name: object) -> bool:
        return name in self._gates

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(sorted(self._gates.values(), key=lambda g: g.name))

    def names(self) -> list[str]:
        """All registered names, sorted."""
        return sorted(self._gates)

    def of_kind(self, kind: str) -> list[Gate]:
        """The registered gates of KIND ("result", "pair" or "arm"), by name."""
        return [g for g in self if g.kind == kind]


def _load_module(path: Path) -> Any:
    mod_name = f"observatory_gate_{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:  # pragma: no cover
        raise ObservatoryError(f"Cannot load gate file {path}.")
    module = importlib.util.module_from_spec(spec)
    try:
        with warnings.catch_warnings():
            # shown to the user once (Python hides a DeprecationWarning outside __main__): an old import path
            # in the file (observatory/gates.py) still works for now
            warnings.simplefilter("default", DeprecationWarning)
            spec.loader.exec_module(module)
    except Exception as e:  # a user's gate file is input: any error in it is a setup error naming it
        raise ObservatoryError(f"Gate file {path} failed to load: {type(e).__name__}: {e}") from None
    return module


def load_gates(directory: Path | str | None = None, registry: GateRegistry | None = None) -> GateRegistry:
    """Load every `*.py` under DIRECTORY (default: the product's gates/) by path."""
    directory = Path(directory) if directory is not None else GATES_DIR
    registry = registry or GateRegistry()
    for path in sorted(directory.glob("*.py")):
        if path.name.startswith("_"):
            continue
        register_module(_load_module(path), path, registry)
    return registry


def register_module(module: Any, path: Path, registry: GateRegistry) -> None:
    """Register every ``@gate`` function defined in MODULE (loaded from PATH, whose bytes version it)."""
    version = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    adapters = {
        fn.__gate_offline__: fn
        for fn in vars(module).values()
        if callable(fn) and hasattr(fn, "__gate_offline__")
    }
    for fn in list(vars(module).values()):
        meta = getattr(fn, "__gate__", None)
        if meta is None or getattr(fn, "__module__", None) != module.__name__:
            continue
        registry.register(
            Gate(
                name=meta["name"],
                description=meta["description"],
                kind=meta["kind"],
                check=fn,
                correctness=meta["correctness"],
                path=str(path),
                version=version,
                offline=adapters.get(meta["name"]),
                applies=meta.get("applies", "all"),
                invalidates=meta.get("invalidates", False),
                sequences=meta.get("sequences", False),
            )
        )


def load_plugin_gates(registry: GateRegistry) -> GateRegistry:
    """Every gate of the ``observatory.gates`` entry points (the built-in gates/ folder among them).

    An entry point names a module (its ``@gate`` functions register) or a directory of gate files.
    """
    for plugin in discover(GATES):
        obj = plugin.load()
        if isinstance(obj, (str, Path)):
            if not Path(obj).is_dir():
                raise ObservatoryError(f"gate plugin {plugin.name!r} ({plugin.dist}) names {obj}, "
                                       "which is not a directory of gate files")
            load_gates(obj, registry)
        elif inspect.ismodule(obj) and obj.__file__:
            register_module(obj, Path(obj.__file__), registry)
        else:
            raise ObservatoryError(f"gate plugin {plugin.name!r} ({plugin.dist}: {plugin.value}) must name a "
                                   f"module of @gate functions or a directory of gate files, not {type(obj).__name__}")
    return registry


_REGISTRIES: dict[tuple[str, ...], GateRegistry] = {}


def default_registry() -> GateRegistry:
    """The built-in gates, loaded once per process."""
    return registry_for(())


def registry_for(gate_dirs: Sequence[str | Path] | None) -> GateRegistry:
    """The built-in and installed gates (entry points) plus every gate file in GATE_DIRS (``--gates-dir``),
    loaded once per process."""
    key = tuple(str(Path(d).resolve()) for d in gate_dirs or ())
    if key not in _REGISTRIES:
        for d in key:
            if not Path(d).is_dir():
                raise ObservatoryError(f"--gates-dir {d}: no such directory of gate files (*.py).")
        registry = load_plugin_gates(GateRegistry())
        for d in key:
            load_gates(d, registry)
        _REGISTRIES[key] = registry
    return _REGISTRIES[key]
