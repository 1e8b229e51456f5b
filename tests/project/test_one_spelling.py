"""One spelling (issue 47 item 1): verdict levels, arm roles and gate names are spelled in one module.

`observatory/model/vocabulary.py` defines every verdict level (and the levels
of a report's rows), their order, the exit codes, the arm roles and the gate names readers look up. Everything
else names them through its constants, so a renamed level or a new role is one
edit, and a typo is a NameError instead of a verdict that silently never
matches. These tests count the bare spellings left in the package, the
built-in gates, the benchmarks and the training scripts; the count is zero.
Each rule has a negative control: a snippet with the bare spelling trips it.
"""

from __future__ import annotations

import ast
from pathlib import Path

from observatory.judge.perf_gates import DEFAULTS
from observatory.model import vocabulary
from observatory.model.gates import default_registry
from tests.support.paths import REPO

ROOT = REPO
SCANNED = ("observatory", "gates", "benchmarks", "training")
HOME = ROOT / "observatory" / "model" / "vocabulary.py"

LEVEL_WORDS = frozenset({*vocabulary.SEVERITY, *vocabulary.ROW_ORDER})
ROLE_WORDS = frozenset(vocabulary.ROLES)
# Gate names that readers look up (a gate module declares its name with the same constant).
GATE_WORDS = frozenset({vocabulary.TOKEN_DIFF, vocabulary.SPEEDUP, vocabulary.TTFT_RATIO, vocabulary.ACCEPTANCE_FLOOR,
                        vocabulary.TOKEN_COUNT})
# Names of the one module that a module inside the package must import from there (not through a re-export).
VOCABULARY_NAMES = frozenset(n for n in dir(vocabulary) if n.isupper() or n in ("rank", "worst", "row_rank"))
# The plugin API re-exports PASS, WARN, FAIL and SKIP for gate files (docs/plugins.md): gates/ may import them there.
PLUGIN_API = "observatory.model.gates"


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body:
            first = n.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _parents(tree: ast.AST) -> dict[int, ast.AST]:
    return {id(c): n for n in ast.walk(tree) for c in ast.iter_child_nodes(n)}


def _in_all(node: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """True for a string in ``__all__ = [...]`` (names exported, not verdicts)."""
    up = parents.get(id(node))
    assign = parents.get(id(up)) if up is not None else None
    return isinstance(assign, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                  for t in assign.targets)


def _mentions_role(node: ast.AST) -> bool:
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and "role" in n.id.lower():
            return True
        if isinstance(n, ast.Attribute) and "role" in n.attr.lower():
            return True
    return False


def _declares_a_gate(node: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """True for a gate file's own name in its ``@gate(NAME, ...)`` or ``@offline(NAME)`` decorator: the gate's
    declaration (a gate file is a plugin, versioned by its bytes; `test_the_gate_names_are_registered_gates`
    holds the vocabulary's names to the registry's)."""
    call = parents.get(id(node))
    return (isinstance(call, ast.Call) and bool(call.args) and call.args[0] is node
            and isinstance(call.func, ast.Name) and call.func.id in ("gate", "offline"))


def bare_levels(source: str, words: frozenset[str] = LEVEL_WORDS) -> list[tuple[int, str]]:
    """(line, word) of each string literal in SOURCE that is exactly one of WORDS (a verdict or row level)."""
    tree = ast.parse(source)
    docs, parents = _docstrings(tree), _parents(tree)
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in words
            and id(n) not in docs and not isinstance(parents.get(id(n)), ast.JoinedStr)
            and not _in_all(n, parents) and not _declares_a_gate(n, parents)]


def bare_roles(source: str) -> list[tuple[int, str]]:
    """(line, word) of each arm role spelled as a literal where a role is compared or passed: ``role == "base"``,
    ``arm_role(a) in ("spec", "fault")``, ``role="aa_copy"``."""
    tree = ast.parse(source)
    found = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Compare) and _mentions_role(n):
            for side in (n.left, *n.comparators):
                found += [(c.lineno, c.value) for c in ast.walk(side)
                          if isinstance(c, ast.Constant) and c.value in ROLE_WORDS]
        elif isinstance(n, ast.keyword) and n.arg and "role" in n.arg.lower():
            found += [(c.lineno, c.value) for c in ast.walk(n.value)
                      if isinstance(c, ast.Constant) and c.value in ROLE_WORDS]
    return found


def indirect_imports(source: str, *, plugin: bool = False) -> list[tuple[int, str]]:
    """(line, name) of each vocabulary name imported from another module of the package (a re-export)."""
    allowed = {"observatory.model.vocabulary"} | ({PLUGIN_API} if plugin else set())
    return [(n.lineno, a.name) for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("observatory") and n.module not in allowed
            for a in n.names if a.name in VOCABULARY_NAMES]


def shadow_definitions(source: str) -> list[tuple[int, str]]:
    """(line, name) of each module-level assignment to a vocabulary name: a second definition that may not agree
    (a module's own ``UNJUDGED = "unjudged"`` read as the verdict level)."""
    found = []
    for n in ast.parse(source).body:
        if isinstance(n, (ast.Assign, ast.AnnAssign)):
            for target in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                names = target.elts if isinstance(target, ast.Tuple) else [target]
                found += [(n.lineno, t.id) for t in names if isinstance(t, ast.Name) and t.id in VOCABULARY_NAMES]
    return found


def _sources() -> list[Path]:
    return sorted(p for top in SCANNED for p in (ROOT / top).rglob("*.py") if p != HOME)


def _report(found: dict[str, list[tuple[int, str]]]) -> str:
    return "\n".join(f"{path}:{line}: {word!r}" for path, hits in found.items() for line, word in hits)


def test_no_bare_verdict_level_outside_the_vocabulary() -> None:
    found = {str(p.relative_to(ROOT)): hits for p in _sources() if (hits := bare_levels(p.read_text()))}
    assert not found, "spell these with observatory.model.vocabulary's constants:\n" + _report(found)


def test_no_bare_gate_name_outside_the_vocabulary() -> None:
    found = {str(p.relative_to(ROOT)): hits for p in _sources() if (hits := bare_levels(p.read_text(), GATE_WORDS))}
    assert not found, "name these gates with observatory.model.vocabulary's constants:\n" + _report(found)


def test_no_bare_arm_role_outside_the_vocabulary() -> None:
    found = {str(p.relative_to(ROOT)): hits for p in _sources() if (hits := bare_roles(p.read_text()))}
    assert not found, "compare roles with observatory.model.vocabulary's constants:\n" + _report(found)


def test_the_package_imports_the_vocabulary_from_its_one_module() -> None:
    found = {}
    for p in _sources():
        rel = p.relative_to(ROOT)
        if rel.parts[0] in ("observatory", "gates"):
            hits = indirect_imports(p.read_text(), plugin=rel.parts[0] == "gates")
            if hits:
                found[str(rel)] = hits
    assert not found, "import these from observatory.model.vocabulary:\n" + _report(found)


def test_no_module_defines_a_vocabulary_name_again() -> None:
    found = {str(p.relative_to(ROOT)): hits for p in _sources() if (hits := shadow_definitions(p.read_text()))}
    assert not found, "these names are the vocabulary's: rename the local one:\n" + _report(found)


def test_the_scan_reads_every_package_module() -> None:
    """The scan is not vacuous: it reads the modules that judge and report verdicts."""
    names = {p.relative_to(ROOT).as_posix() for p in _sources()}
    assert {"observatory/judge/verdict.py", "observatory/report/junit.py", "gates/token_diff.py",
            "benchmarks/false_alarms.py"} <= names
    assert len(names) > 200


# -- negative controls: each rule trips on the spelling it forbids --------------------------------------------

def test_a_bare_level_trips_the_rule() -> None:
    src = '"""FAIL in a docstring is prose."""\nx = f"{v} FAIL"\n__all__ = ["FAIL"]\nif v == "FAIL":\n    pass\n'
    assert bare_levels(src) == [(4, "FAIL")]
    assert bare_levels('rows.sort(key=lambda r: r["verdict"] == "NOT_MEASURABLE")\n') == [(1, "NOT_MEASURABLE")]
    assert bare_levels("if v == FAIL:\n    pass\n") == []
    assert bare_levels('td = reg.get("token_diff")\n', GATE_WORDS) == [(1, "token_diff")]
    assert bare_levels('@gate("token_diff", "what it checks")\ndef check():\n    pass\n', GATE_WORDS) == []


def test_a_bare_role_trips_the_rule() -> None:
    assert bare_roles('if role == "base":\n    pass\n') == [(1, "base")]
    assert bare_roles('ok = arm_role(a) in ("spec", "fault")\n') == [(1, "spec"), (1, "fault")]
    assert bare_roles('arm = Arm(role="aa_copy")\n') == [(1, "aa_copy")]
    # an arm named "base" (the default arm name, not a role) and chat roles are not arm roles
    assert bare_roles('arms = ["base", "mtp1"]\nif m["role"] == "user":\n    pass\n') == []
    assert bare_roles("if role == BASE:\n    pass\n") == []


def test_a_re_exported_name_trips_the_rule() -> None:
    assert indirect_imports("from observatory.judge.verdict import EXIT, decide\n") == [(1, "EXIT")]
    assert indirect_imports("from observatory.model.gates import FAIL, gate\n") == [(1, "FAIL")]
    assert indirect_imports("from observatory.model.gates import FAIL, gate\n", plugin=True) == []
    assert indirect_imports("from observatory.model.vocabulary import FAIL, rank\n") == []


def test_a_second_definition_trips_the_rule() -> None:
    assert shadow_definitions('OK, UNJUDGED = "ok", "unjudged"\nNAME = "x"\n') == [(1, "UNJUDGED")]
    assert shadow_definitions('def f():\n    FAIL = 1\n') == []


def test_the_levels_and_roles_are_the_vocabularys() -> None:
    """The words the rules look for are the vocabulary's own: a level added there is covered here."""
    assert {"PASS", "WARN", "FAIL", "INVALID", "KNOWN", "NOTE", "ERROR", "NOT_MEASURABLE", "INFO"} <= LEVEL_WORDS
    assert {"base", "aa_copy", "spec", "fault", "variant"} == ROLE_WORDS
    assert vocabulary.row_rank(vocabulary.FAIL) < vocabulary.row_rank(vocabulary.WARN) < vocabulary.row_rank(None)


def test_the_gate_names_are_registered_gates() -> None:
    """The vocabulary's name of a built-in gate is the one its file declares: the two cannot drift apart."""
    assert default_registry().get(vocabulary.TOKEN_DIFF).name == vocabulary.TOKEN_DIFF
    assert {vocabulary.SPEEDUP, vocabulary.TTFT_RATIO} <= set(DEFAULTS)
