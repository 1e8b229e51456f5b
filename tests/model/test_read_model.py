"""The typed read model (issue 14 item 1): `build` returns frozen objects, ``show --json`` keeps its shape.

The expected JSON under tests/fixtures/show_json/ was written by ``show --json``
of the dict-era `report_data.build` (before the read model), on a copy of
examples/h200/h200-tiny.db.gz and on the field-channel session `judged_soak_session`
makes; the read model must print the same bytes. Should a later change mean to
alter the documented shape, regenerate them with ``show --json`` and say so.
Regenerated when the shape grew, each time by one field and nothing else:
the top-level ``"schema_version": 1`` (issue 30 item 8); ``vs_base.step``, S at
the median engine step (issue 29); and inside it ``base_blocks_ms``, the median
step of each base block that the pooled base step is made of, and S_step's
precision fields (``se``, ``half_width``, ``detectable_change``, ``timed_requests``,
``timed_s``, ``traffic_for``: null where S_step is not measurable; issue 29).
Then ``depths`` (the speculation depths a session covered) with its ``DEPTHS``
NOTE among the reasons (issue 49 item 5).
"""

from __future__ import annotations

import ast
import dataclasses
import gzip
import json
from pathlib import Path

import pytest

from observatory.model.paths import REPO_ROOT
from observatory.model.read_model import ArmFigures, SessionView
from observatory.report.data import build, counters
from observatory.report.jsonout import to_json
from observatory.store.session_store import Store
from tests.support import paths
from tests.support.paths import example_db
from tests.support.sessions import show_json
from tests.support.state_channels import judged_soak_session

FIXTURES = paths.FIXTURES / "show_json"
PACKAGE = REPO_ROOT / "observatory"


def test_show_json_of_a_stored_gpu_session_is_unchanged(tmp_path: Path) -> None:
    """Issue 14 item 1: ``show --json`` of examples/h200/h200-tiny.db.gz prints the dict era's bytes."""
    db = tmp_path / "tiny.db"
    example_db("h200/h200-tiny.db", db)
    want = gzip.decompress((FIXTURES / "h200-tiny.json.gz").read_bytes()).decode()
    assert show_json(db) == want


def test_show_json_of_a_channel_session_is_unchanged(tmp_path: Path) -> None:
    """Issue 14 item 1: channels, channel verdicts with their details and figures print as before."""
    got = show_json(judged_soak_session(tmp_path))
    assert '"channels": [{"name": "soak"' in got and '"channel_verdicts": {"soak"' in got
    assert got == (FIXTURES / "channel-soak.json").read_text()


def test_build_returns_frozen_typed_objects(tmp_path: Path) -> None:
    """Readers get attributes, not string keys; nobody can change the session under another reader."""
    data = build(Store(str(judged_soak_session(tmp_path))))
    assert isinstance(data, SessionView)
    mtp2 = data.arms[1]
    assert (mtp2.name, mtp2.is_spec, data.verdict.verdict, data.verdict.exit_code) == ("mtp2", True, "FAIL", 1)
    assert data.channels[0].arms[1].verdicts["soak"].verdict == "FAIL"
    with pytest.raises(dataclasses.FrozenInstanceError):
        mtp2.status = "crashed"  # type: ignore[misc]
    assert to_json(data) == to_json(dataclasses.replace(data))


def test_unknown_is_not_zero_and_extra_stored_keys_are_kept() -> None:
    """Counters never read stay null; keys the model does not name (``problem``) print after the four."""
    assert to_json(counters(None)) == '{"drafts": null, "draft_tokens": null, "accepted": null, "accepted_per_pos": null}'
    c = counters({"problem": "counters decreased", "accepted": 3, "drafts": 2})
    assert list(json.loads(to_json(c))) == ["drafts", "draft_tokens", "accepted", "accepted_per_pos", "problem"]
    fig = ArmFigures.from_stored({"speed": {"requests": 0}, "future_figure": 1, "acceptance": None})
    assert (fig.acceptance, fig.vs_base, fig.stored) == (None, None, ("speed", "future_figure", "acceptance"))
    assert to_json(fig) == '{"speed": {"requests": 0}, "future_figure": 1, "acceptance": null}'


def _module_imports(path: Path) -> set[str]:
    """The observatory modules PATH imports at module level (``if TYPE_CHECKING:`` blocks excluded)."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("observatory")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("observatory"):
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                found.add(sub if _module_path(sub) else node.module)
    return found


def _module_path(name: str) -> Path | None:
    base = REPO_ROOT.joinpath(*name.split("."))
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.is_file():
            return p
    return None


def _graph() -> dict[str, set[str]]:
    graph = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(REPO_ROOT).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        graph[name] = _module_imports(path)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of GRAPH (module -> modules it imports), or None."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                return path[path.index(n):] + [n]
            if n not in state and (found := visit(n)):
                return found
        path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_import_graph_has_no_cycles() -> None:
    """Issue 14: data flows one way, so no module-level import leads back to where it started."""
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]  # the check can fail
    assert _cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None
    graph = _graph()
    assert len(graph) > 50 and "observatory.report.data" in graph["observatory.commands.sessions"]
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_read_model_imports_nothing_and_its_readers_import_it() -> None:
    """The read model sits between the figures and the renderers: it imports no observatory module,
    and the builder and every reader import it."""
    graph = _graph()
    assert graph["observatory.model.read_model"] == {"observatory.model.vocabulary"}  # plain constants only
    readers = ("report.data", "judge.verdict", "report.html", "report.junit", "report.openmetrics", "report.terminal",
               "judge.summaries", "report.trends", "report.jsonout", "session.fault_selftest")
    assert [r for r in readers if "observatory.model.read_model" not in graph[f"observatory.{r}"]] == []
