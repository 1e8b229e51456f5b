"""Gate registry: built-ins load by path; bad gate files are rejected by name and file (issue 4)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from observatory.model.errors import ObservatoryError
from observatory.model.gates import load_gates
from observatory.model.paths import GATES_DIR

BUILT_INS = {
    # name: (kind, correctness)
    "answer_fields": ("pair", False),
    "answer_identities": ("result", True),
    "answer_usage": ("arm", False),
    "answers": ("arm", False),
    "content": ("result", True),
    "degeneracy": ("result", True),
    "distinct_outputs": ("arm", False),
    "expect": ("result", True),
    "special_tokens": ("pair", False),
    "token_diff": ("pair", False),
    "tool_calls": ("result", True),
}


def test_load_gates_loads_all_built_ins() -> None:
    registry = load_gates()
    assert {g.name: (g.kind, g.correctness) for g in registry} == BUILT_INS
    for g in registry:
        assert Path(g.path).parent == GATES_DIR
        assert g.offline is not None, f"{g.name} has no @offline adapter"
        assert g.description and "\n" not in g.description and len(g.description) <= 100
        assert re.fullmatch(r"[0-9a-f]{12}", g.version)


def test_gate_files_are_not_imported_as_modules() -> None:
    """Gates load by path: nothing named after a gate file lands in sys.modules."""
    load_gates()
    assert not {"token_diff", "degeneracy", "tool_calls", "content", "expect", "gates"} & set(
        sys.modules
    )


GOOD = """
from observatory.model.gates import PASS, GateResult, gate

@gate("{name}", "A test gate.")
def check(output, probe):
    return GateResult(PASS)
"""


def write(directory: Path, filename: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / filename
    path.write_text(text)
    return path


def test_duplicate_names_are_rejected_naming_both_files(tmp_path: Path) -> None:
    a = write(tmp_path, "a_gate.py", GOOD.format(name="twice"))
    b = write(tmp_path, "b_gate.py", GOOD.format(name="twice"))
    with pytest.raises(ObservatoryError) as e:
        load_gates(tmp_path)
    msg = str(e.value)
    assert "'twice'" in msg and str(a) in msg and str(b) in msg


def test_user_gate_clashing_with_a_built_in_is_rejected(tmp_path: Path) -> None:
    write(tmp_path, "mine.py", GOOD.format(name="degeneracy"))
    registry = load_gates()
    with pytest.raises(
        ObservatoryError,
        match=r"Gate 'degeneracy' in .*mine\.py is already registered by .*degeneracy\.py",
    ):
        load_gates(tmp_path, registry)


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        (
            'from observatory.model.gates import gate\n@gate("bad", "x")\ndef check(out, probe): ...\n',
            "takes arguments ('out', 'probe'); a result gate must take ('output', 'probe')",
        ),
        (
            'from observatory.model.gates import gate\n@gate("bad", "x", kind="pair")\ndef check(base, spec, probe): ...\n',
            "a pair gate must take ('spec', 'base', 'probe')",
        ),
        (
            'from observatory.model.gates import gate\n@gate("bad", "x", kind="arm")\ndef check(outputs, probe): ...\n',
            "takes arguments ('outputs', 'probe')",
        ),
        (
            'from observatory.model.gates import gate\n@gate("bad", "x", kind="session")\ndef check(output, probe): ...\n',
            "has kind 'session'",
        ),
    ],
    ids=["result-wrong-names", "pair-wrong-order", "arm-extra-arg", "unknown-kind"],
)
def test_bad_signatures_are_rejected_naming_gate_and_file(
    tmp_path: Path, source: str, fragment: str
) -> None:
    path = write(tmp_path, "broken.py", source)
    with pytest.raises(ObservatoryError) as e:
        load_gates(tmp_path)
    msg = str(e.value)
    assert f"Gate 'bad' in {path}" in msg
    assert fragment in msg


def test_underscore_files_are_not_scanned(tmp_path: Path) -> None:
    write(tmp_path, "_helpers.py", GOOD.format(name="hidden"))
    write(tmp_path, "shown.py", GOOD.format(name="shown"))
    assert load_gates(tmp_path).names() == ["shown"]


def test_version_follows_the_file_content(tmp_path: Path) -> None:
    path = write(tmp_path, "g.py", GOOD.format(name="g"))
    v1 = load_gates(tmp_path).get("g").version
    path.write_text(GOOD.format(name="g") + "\n# changed\n")
    assert load_gates(tmp_path).get("g").version != v1


def test_unknown_gate_name_lists_the_known_ones() -> None:
    with pytest.raises(
        ObservatoryError, match="No gate named 'nope'. Known gates: answer_fields, answer_identities, answer_usage, answers, content"
    ):
        load_gates().get("nope")
