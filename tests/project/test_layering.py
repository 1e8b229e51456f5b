"""The package's layering: subpackages by phase, imports pointing down only, no circles (issue 26 item 1).

Every import counts: module-level, function-level and ``TYPE_CHECKING`` ones
alike, read from the source with `ast` (nothing is imported here).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from functools import cache
from pathlib import Path

from tests.support.paths import REPO

PACKAGE = REPO / "observatory"

# Bottom first: a module may import its own subpackage and those before it, never one after it.
LAYERS = ("faults", "model", "store", "engines", "client", "judge", "channels", "session", "triage", "report",
          "commands", "cli", "__main__",
          "gates")  # observatory/gates.py: the old import path of a user gate file (issue 47 item 7), imported by none


@cache
def _source(path: Path) -> str:
    """A module's text, read once for every rule below."""
    return path.read_text(encoding="utf-8")


@cache
def _parse(source: str) -> ast.Module:
    """SOURCE's syntax tree, parsed once for every rule below."""
    return ast.parse(source)


def _modules() -> dict[str, Path]:
    mods = {}
    for p in PACKAGE.rglob("*.py"):
        if "_bundled" in p.parts:
            continue
        parts = list(p.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = p
    return mods


def _imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of ours it imports (a name imported from a package counts as its submodule)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in mods.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(_parse(_source(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - node.level + 1]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in mods else module for a in node.names]
            else:
                continue
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != name:
                    edges[name].add(t)
    return edges


def _cycles(mods: dict[str, Path], edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for m in mods:
        if m not in index:
            visit(m)
    return out


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None  # None: observatory/__init__ (the version), below everything


def test_every_module_has_a_layer() -> None:
    strays = [m for m in _modules() if _layer(m) is not None and _layer(m) not in LAYERS]
    assert not strays, f"modules outside the layers {LAYERS}: {strays}"


def test_no_import_circles() -> None:
    mods = _modules()
    assert not _cycles(mods, _imports(mods))


def test_imports_point_down() -> None:
    mods = _modules()
    upward = []
    for a, targets in _imports(mods).items():
        la = _layer(a)
        for b in targets:
            lb = _layer(b)
            if la is None or lb is None or la == lb:
                continue
            if LAYERS.index(lb) > LAYERS.index(la):
                upward.append(f"{a} -> {b}")
    assert not upward, "imports pointing up the layers:\n" + "\n".join(sorted(upward))


def test_the_faults_plugin_imports_nothing_else_of_ours() -> None:
    """It loads inside vLLM's processes: nothing of the observatory beyond itself."""
    mods = _modules()
    edges = _imports(mods)
    outside = [f"{a} -> {b}" for a in mods if _layer(a) == "faults" for b in edges[a] if _layer(b) != "faults"]
    assert not outside


def test_negative_control_a_circle_is_found() -> None:
    """The cycle finder itself: two modules importing each other are one circle."""
    mods = {"observatory.model.a": Path("a"), "observatory.model.b": Path("b"), "observatory.model.c": Path("c")}
    edges: dict[str, set[str]] = defaultdict(set, {"observatory.model.a": {"observatory.model.b"},
                                                   "observatory.model.b": {"observatory.model.a"},
                                                   "observatory.model.c": {"observatory.model.a"}})
    assert _cycles(mods, edges) == [["observatory.model.a", "observatory.model.b"]]


def test_channels_see_typed_views_not_orm_rows() -> None:
    """Issue 47 item 4: the ORM models stay under store/; a channel reads `observatory.store.stored`'s views."""
    mods = _modules()
    edges = _imports(mods)
    orm = [f"{a} -> {b}" for a in mods if _layer(a) == "channels" for b in edges[a] if b == "observatory.store.db"]
    assert not orm, "channels importing the ORM rows:\n" + "\n".join(sorted(orm))


LIVE_NAMES = ("run", "twin", "client")  # a channel's live arm, a second engine of it, an engine's client


def _any_typed(source: str) -> list[str]:
    """Parameters of SOURCE named after a live arm or its client (`LIVE_NAMES`) annotated ``Any``."""
    found = []
    for node in ast.walk(_parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs:
                if a.arg in LIVE_NAMES and isinstance(a.annotation, ast.Name) and a.annotation.id == "Any":
                    found.append(f"{node.name}({a.arg}) line {node.lineno}")
    return found


def test_no_channel_takes_an_any_typed_arm() -> None:
    """Issue 47 item 4: a channel's measure gets a typed `LiveArm` (channels/live_arm.py), its client an
    `EngineClient`, never ``Any``."""
    found = [f"{p.name}: {f}" for p in sorted((PACKAGE / "channels").glob("*.py"))
             for f in _any_typed(_source(p))]
    assert not found, "Any-typed arms in channels/:\n" + "\n".join(found)


def test_negative_control_an_any_typed_arm_is_found() -> None:
    assert _any_typed("def measure(run: Any, probes: list[Probe]) -> None: ...") == ["measure(run) line 1"]
    assert _any_typed("def measure(run: LiveArm, probes: Any) -> None: ...") == []


def _default_engine_branches(source: str) -> list[int]:
    """The lines of SOURCE comparing something with ``DEFAULT_ENGINE`` (``==``, ``!=``): a branch on the default
    engine."""
    lines = []
    for node in ast.walk(_parse(source)):
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops):
            if any(isinstance(x, ast.Name) and x.id == "DEFAULT_ENGINE" for x in [node.left, *node.comparators]):
                lines.append(node.lineno)
    return lines


def test_no_engine_branch_outside_engines() -> None:
    """Issue 47 item 4: the default engine's quirks (faults, images, parsers, dev mode, its CPU build's KV cache,
    its metric names) are its adapter's (engines/vllm.py); no module outside engines/ compares with
    DEFAULT_ENGINE (six did)."""
    found = [f"{m}:{n}" for m, p in _modules().items() if _layer(m) != "engines"
             for n in _default_engine_branches(_source(p))]
    assert not found, "branches on the default engine outside engines/:\n" + "\n".join(found)


def test_negative_control_a_default_engine_branch_is_found() -> None:
    assert _default_engine_branches("if arm.engine != DEFAULT_ENGINE:\n    pass\n") == [1]
    assert _default_engine_branches("x = DEFAULT_ENGINE\n") == []


def _engine_names_in_code(source: str) -> list[int]:
    """The lines of SOURCE's string literals (docstrings aside) naming a vLLM environment variable (``VLLM_``) or
    metric (``vllm:``)."""
    tree = _parse(source)
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docs and ("VLLM_" in n.value or "vllm:" in n.value)]


def test_no_vllm_variable_or_metric_outside_engines() -> None:
    """Issue 47 item 4: vLLM's environment variables and metric names (dev mode, the CPU build's KV cache, the
    cache config and preemption metrics) are its adapter's; faults/ is vLLM's own plugin."""
    found = [f"{m}:{n}" for m, p in _modules().items() if _layer(m) not in ("engines", "faults")
             for n in _engine_names_in_code(_source(p))]
    assert not found, "vLLM names outside engines/:\n" + "\n".join(found)


def test_negative_control_a_vllm_name_is_found() -> None:
    assert _engine_names_in_code('"""vllm:x in a docstring"""\nENV = {"VLLM_SERVER_DEV_MODE": "1"}\n') == [2]


def _imported_names(source: str) -> set[tuple[str, str]]:
    """(module, name) of every ``from MODULE import NAME`` in SOURCE, at any level of the code."""
    return {(node.module or "", a.name) for node in ast.walk(_parse(source))
            if isinstance(node, ast.ImportFrom) for a in node.names}


# Where an arm's role may be derived from facts rather than read from the stored arm: the rule itself, the session's
# planning (which writes it) and the store (migration m010 and a row written without it)
DERIVES_ROLES = ("model", "session", "store")


def test_roles_and_engines_are_read_not_derived() -> None:
    """Issue 47 item 2: each arm's role and engine are stored with the session and read from the arm; nothing imports
    engines/launches.py (deleted: it derived them from the launch above engines/), and only planning and the store
    apply the role rule."""
    mods = _modules()
    names = {m: _imported_names(_source(p)) for m, p in mods.items()}
    launches = [m for m in mods if m == "observatory.engines.launches"]
    importers = [m for m, found in names.items() if _layer(m) != "engines"
                 and any(mod == "observatory.engines.launches" or (mod, n) == ("observatory.engines", "launches")
                         for mod, n in found)]
    derive = [f"{m}: {n}" for m, found in names.items() if _layer(m) not in DERIVES_ROLES
              for mod, n in found if mod == "observatory.model.roles" and n in ("roles_for", "assign_roles")]
    assert not launches and not importers and not derive, (launches, importers, derive)


def test_negative_control_a_derived_role_is_found() -> None:
    found = _imported_names("def f():\n    from observatory.model.roles import roles_for\n"
                            "from observatory.engines.launches import base_arm\n")
    assert ("observatory.model.roles", "roles_for") in found
    assert ("observatory.engines.launches", "base_arm") in found


# What talks to a server: the HTTP libraries, and the client's modules that send (client/answer.py reads an answer
# already received, plain data)
NETWORK = ("httpx", "openai", "socket", "http.client", "urllib.request", "observatory.client.send",
           "observatory.client.wire", "observatory.client.sse", "observatory.client.batch", "observatory.client.openai_sdk")


def _network_imports(source: str) -> list[str]:
    """The modules of NETWORK that SOURCE imports (at any level of the code)."""
    found = []
    for node in ast.walk(_parse(source)):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
        found += [n for n in names if any(n == m or n.startswith(m + ".") for m in NETWORK)]
    return found


def test_the_judge_needs_no_server() -> None:
    """Issue 47 item 3: judging reads only the store; tokenizing prompts for the cross-engine comparison happens in
    the session phase (observatory/session/prompt_tokens.py), so no module of judge/ imports what talks to a
    server (tests/judge/test_judge_offline.py judges a stored session with every connection refused)."""
    found = [f"{m}: {n}" for m, p in _modules().items() if _layer(m) == "judge"
             for n in _network_imports(_source(p))]
    assert not found, "judge/ importing the network:\n" + "\n".join(found)


def test_negative_control_a_network_import_is_found() -> None:
    assert _network_imports("import httpx\ndef f():\n    from observatory.client.send import EngineClient\n") == [
        "httpx", "observatory.client.send"]
    assert _network_imports("from observatory.client.answer import MALFORMED\n") == []


def _unexplained_lazy_imports(source: str) -> list[int]:
    """The lines of SOURCE importing one of our modules inside a function with no comment on that line or the
    line above saying why (an import that avoids a real circle, or a heavy start-up one, says which)."""
    lines = source.splitlines()
    found = []
    for fn in ast.walk(_parse(source)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("observatory")):
                here, above = lines[node.lineno - 1], lines[node.lineno - 2].strip()
                if "#" not in here and not above.startswith("#"):
                    found.append(node.lineno)
    return sorted(set(found))


def test_function_level_imports_say_why() -> None:
    """Issue 47 item 8: a function-level import of our own modules is a top-level one unless it avoids a heavy
    start-up import or loads inside the engine only when needed, and then its comment says so (48 -> 8)."""
    found = [f"{m}:{n}" for m, p in _modules().items()
             for n in _unexplained_lazy_imports(_source(p))]
    assert not found, "function-level imports with no reason given:\n" + "\n".join(found)


def test_negative_control_an_unexplained_lazy_import_is_found() -> None:
    source = ("def f():\n    from observatory.model import roles\n"
              "def g():\n    from observatory.model import arms  # here: a reason\n")
    assert _unexplained_lazy_imports(source) == [2]


def _same_names(modules: list[str]) -> dict[str, list[str]]:
    """Module file names found in more than one folder, with the folders: package __init__ files aside, and the
    top-level modules (observatory/gates.py keeps an old import path on purpose)."""
    seen: dict[str, list[str]] = defaultdict(list)
    for m in modules:
        folder, _, name = m.rpartition(".")
        if folder.count(".") >= 1:
            seen[name].append(folder)
    return {name: sorted(folders) for name, folders in seen.items() if len(folders) > 1}


def test_no_module_name_in_two_folders() -> None:
    """Issue 47 item 8: each module's name says what it is, so no name means two things (five did: arms,
    conditions, history, sdk, summaries)."""
    mods = [m for m, p in _modules().items() if p.name != "__init__.py"]
    assert not _same_names(mods)


def test_negative_control_a_shared_name_is_found() -> None:
    assert _same_names(["observatory.model.arms", "observatory.engines.arms", "observatory.cli"]) == {
        "arms": ["observatory.engines", "observatory.model"]}
