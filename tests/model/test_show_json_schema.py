"""Issue 30 item 8: ``show --json`` carries ``schema_version`` and matches the committed JSON Schema.

docs/show-json.schema.json is generated from the read model's dataclasses
(observatory.model.json_schema); it must be current, every committed example
database's ``show --json`` and a freshly judged stub session (the
state-channel stub of test_read_model) must validate, and a document with a
wrong type or a missing required key must not (the negative control).
"""

from __future__ import annotations

import copy
import gzip
import json
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from observatory.model.json_schema import SCHEMA_PATH, schema_text
from observatory.model.paths import REPO_ROOT
from observatory.model.read_model import SCHEMA_VERSION
from tests.support.paths import example_db
from tests.support.sessions import show_json
from tests.support.state_channels import judged_soak_session
from tests.support.stub_server import StubServer
from tests.support.stub_sessions import run_gate

EXAMPLES = REPO_ROOT / "examples"
DBS = sorted([*EXAMPLES.glob("h200/*.db.gz"), *EXAMPLES.glob("h200x2/*.db.gz"), *EXAMPLES.glob("h200-nightly/*.db.gz")])


def _validator() -> Any:
    doc = json.loads((REPO_ROOT / SCHEMA_PATH).read_text())
    cls = jsonschema.validators.validator_for(doc)
    cls.check_schema(doc)
    return cls(doc)


def test_committed_schema_is_what_the_read_model_generates() -> None:
    """The schema cannot drift from the code: regenerating it gives the committed file, byte for byte."""
    assert (REPO_ROOT / SCHEMA_PATH).read_text() == schema_text()
    assert _validator().schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_every_example_database_matches_the_schema(tmp_path: Path) -> None:
    """examples/h200, h200x2 and h200-nightly (gunzipped): each ``show --json`` validates and says version 1."""
    assert len(DBS) >= 6, DBS  # the committed examples, so a glob that matches nothing cannot pass
    v = _validator()
    for src in DBS:
        db = tmp_path / src.name.removesuffix(".gz")
        if src.suffix == ".gz":
            db.write_bytes(gzip.decompress(src.read_bytes()))
        else:
            shutil.copy(src, db)
        doc = json.loads(show_json(db))
        assert doc["schema_version"] == SCHEMA_VERSION == 1
        errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in v.iter_errors(doc)]
        assert errors == [], (src.name, errors[:5])


def test_a_freshly_judged_stub_session_matches_the_schema(tmp_path: Path) -> None:
    """A stub session judged now (channels, channel verdicts, figures) validates; its first key is the version."""
    doc = json.loads(show_json(judged_soak_session(tmp_path)))
    assert next(iter(doc)) == "schema_version" and doc["channels"] and doc["arms"][1]["acceptance"] is not None
    _validator().validate(doc)


@pytest.mark.parametrize(("spec", "verdict"), [("ok", "FAIL"), ("hang", "INVALID")])
def test_gate_json_of_a_stub_run_matches_the_schema(tmp_path: Path, spec: str, verdict: str) -> None:
    """``gate --json`` writes the same versioned object: a run against the STUB server (a wrong token on
    demand; a hung arm), judged now, validates."""
    with StubServer("ok", token=5) as base, StubServer(spec, token=9) as mtp1:
        _, out, _ = run_gate(tmp_path, f"base={base.url},mtp1={mtp1.url}", "--request-timeout", "2")
    doc = json.loads((out / "session.json").read_text())
    assert (doc["schema_version"], doc["verdict"]["verdict"]) == (SCHEMA_VERSION, verdict)
    assert doc["arms"][0]["results"] and [a["name"] for a in doc["arms"]] == ["base", "mtp1"]
    _validator().validate(doc)


def _mutations(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for what, change in [
        ("no schema_version", lambda d: d.pop("schema_version")),
        ("another schema_version", lambda d: d.__setitem__("schema_version", 2)),
        ("session id as a string", lambda d: d["session"].__setitem__("id", "1")),
        ("an arm without its counters", lambda d: d["arms"][0].pop("counters")),
        ("token ids as strings", lambda d: d["arms"][0]["results"][0].__setitem__("token_ids", ["5"])),
        ("a verdict without its reason", lambda d: next(iter(d["arms"][0]["results"][0]["verdicts"].values()))
         .pop("reason")),
        ("an unknown key in a result", lambda d: d["arms"][0]["results"][0].__setitem__("surprise", 1)),
        ("exit code as a string", lambda d: d["verdict"].__setitem__("exit_code", "1")),
    ]:
        bad = copy.deepcopy(doc)
        change(bad)
        out.append((what, bad))
    return out


def test_negative_control_wrong_types_and_missing_keys_fail(tmp_path: Path) -> None:
    """A wrong type or a missing required key fails validation, so the checks above can fail (on h200-tiny.db,
    which has results with verdicts)."""
    example_db("h200/h200-tiny.db", tmp_path / "tiny.db")
    doc = json.loads(show_json(tmp_path / "tiny.db"))
    v = _validator()
    assert v.is_valid(doc)
    for what, bad in _mutations(doc):
        with pytest.raises(jsonschema.ValidationError):
            v.validate(bad)
        assert not v.is_valid(bad), what
