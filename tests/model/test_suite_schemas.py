"""Issue 50 item 2: the probe-suite and arms-file formats are documented, with JSON Schemas generated from code.

docs/probes.schema.json and docs/arms.schema.json must be what the code
generates (a stale one fails here); every bundled suite and every TOML
example in docs/probes.md and docs/arms.md must load and validate against
the committed schema with plain jsonschema; and a document the schema
refuses (the negative control) must be refused by the loader too, with the
loader's one line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from observatory.model import arms_schema, probe_schema
from observatory.model.arms import load_arms_file
from observatory.model.errors import ArmError, ProbeFileError
from observatory.model.paths import PROBES_DIR, REPO_ROOT
from observatory.model.probes import load_probe_file
from observatory.model.tomlfile import tomllib
from tests.support.paths import FIXTURES

SCHEMAS = {"probes": (probe_schema.SCHEMA_PATH, probe_schema.schema_text),
           "arms": (arms_schema.SCHEMA_PATH, arms_schema.schema_text)}


def _validator(which: str) -> Any:
    doc = json.loads((REPO_ROOT / SCHEMAS[which][0]).read_text())
    cls = jsonschema.validators.validator_for(doc)
    cls.check_schema(doc)
    return cls(doc)


def _toml_blocks(doc: str) -> list[str]:
    return re.findall(r"```toml\n(.*?)```", (REPO_ROOT / "docs" / doc).read_text(), re.S)


@pytest.mark.parametrize("which", sorted(SCHEMAS))
def test_committed_schema_is_what_the_code_generates(which: str) -> None:
    """Regenerate with `python -m observatory.model.probe_schema > docs/probes.schema.json` (arms_schema: arms)."""
    path, text = SCHEMAS[which]
    assert (REPO_ROOT / path).read_text() == text(), f"{path} is stale: regenerate it"
    assert _validator(which).schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_bundled_suites_and_the_docs_examples_validate(tmp_path: Path) -> None:
    v = _validator("probes")
    suites = sorted(PROBES_DIR.glob("*.toml"))
    assert {p.stem for p in suites} >= {"default", "field", "generic", "selftest"}
    blocks = _toml_blocks("probes.md")
    assert blocks, "docs/probes.md has no TOML example"
    for i, text in enumerate([p.read_text() for p in suites] + blocks):
        assert list(v.iter_errors(tomllib.loads(text))) == [], i
        f = tmp_path / f"s{i}.toml"
        f.write_text(text)
        assert load_probe_file(f)
    a = _validator("arms")
    arm_blocks = _toml_blocks("arms.md")
    assert arm_blocks, "docs/arms.md has no TOML example"
    for i, text in enumerate(arm_blocks + [p.read_text() for p in (FIXTURES).glob("arms*.toml")]):
        assert list(a.iter_errors(tomllib.loads(text))) == [], i
        f = tmp_path / f"a{i}.toml"
        f.write_text(text)
        assert load_arms_file(f)


@pytest.mark.parametrize(("text", "said"), [
    ('[[probe]]\nname = "a"\ncategory = "counting"\nprompt = "x"\nmax_tokens = 0\n', "'max_tokens' must be an integer"),
    ('[[probe]]\nname = "a"\ncategory = "counting"\nprompt = "x"\nparams = { temperature = 0.7 }\n',
     "a sampling field is not sent"),
    ('[[probe]]\nname = "a"\ncategory = "counting"\nmessages = [{ role = "user" }]\n', "each message needs a 'content'"),
    ('[[probe]]\nname = "a"\ncategory = "counting"\nprompt = "x"\noriginal = { colour = "red" }\n',
     "unknown key 'original.colour'"),
], ids=["max-tokens-0", "sampling-in-params", "message-without-content", "unknown-original-field"])
def test_what_the_schema_refuses_the_loader_refuses_in_one_line(tmp_path: Path, text: str, said: str) -> None:
    """The negative control: plain jsonschema and the loader agree, the loader in the project's words."""
    assert list(_validator("probes").iter_errors(tomllib.loads(text)))
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(ProbeFileError) as e:
        load_probe_file(f)
    assert said in str(e.value) and "\n" not in str(e.value) and str(f) in str(e.value)


def test_an_arms_file_the_schema_refuses_is_one_line(tmp_path: Path) -> None:
    text = 'suite_format = "xml"\n[arms.a]\nspeculative_config = { method = "mtp" }\n'
    assert list(_validator("arms").iter_errors(tomllib.loads(text)))
    f = tmp_path / "arms.toml"
    f.write_text(text)
    with pytest.raises(ArmError, match="suite_format must be one of toml, openai"):
        load_arms_file(f)


def test_ci_doc_mentions_suite() -> None:
    """Issue 50: docs/ci.md never mentioned --suite."""
    text = (REPO_ROOT / "docs" / "ci.md").read_text()
    assert "--suite" in text and "docs/probes.md" in text and "suite import" in text
