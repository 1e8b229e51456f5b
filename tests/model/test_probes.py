"""Probe files load strictly: unknown keys are errors naming the file and key (issue 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from observatory.model.errors import ProbeFileError
from observatory.model.probes import CATEGORIES, load_probe_file, resolve_suite

GOOD = '''
[[probe]]
name = "count-3-7"
category = "counting"
messages = [{ role = "user", content = "Count from 3 to 7." }]
max_tokens = 32
[probe.expect]
exact = "3, 4, 5, 6, 7"
'''


def test_loads_and_hashes(tmp_path: Path) -> None:
    f = tmp_path / "s.toml"
    f.write_text(GOOD)
    (p,) = load_probe_file(f)
    assert p.kind == "chat" and p.expect == {"exact": "3, 4, 5, 6, 7"}
    assert p.gates == ["content", "expect"]  # the category default
    assert len(p.content_hash) == 16
    f2 = tmp_path / "t.toml"
    f2.write_text(GOOD.replace("3 to 7", "3 to 8"))
    assert load_probe_file(f2)[0].content_hash != p.content_hash


def test_default_suite_loads_and_covers_the_categories() -> None:
    probes = load_probe_file(resolve_suite("default"))
    cats = {p.category for p in probes}
    for needed in ("recitation", "counting", "sequence", "tool_call", "prose_en", "prose_zh"):
        assert needed in cats
    assert cats <= set(CATEGORIES)
    assert any(p.tools for p in probes)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda s: s.replace("max_tokens = 32", "max_tokens = 32\ntemperature = 1"), "unknown key 'temperature'"),
        (lambda s: s.replace('exact = "3, 4, 5, 6, 7"', 'exactly = "x"'), "unknown key 'expect.exactly'"),
        (lambda s: s.replace('"counting"', '"poetry"'), "'category' must be one of"),
        (lambda s: s.replace("max_tokens = 32", 'prompt = "x"'), "exactly one of 'messages'"),
        (lambda s: s.replace('exact = "3, 4, 5, 6, 7"', 'regex = "("'), "does not compile"),
        (lambda s: s + "\n[[probe]]\nname = \"count-3-7\"\ncategory = \"counting\"\nprompt = \"x\"\n", "appears twice"),
        (lambda s: "suite = 1\nextra = 2\n" + s, "unknown top-level key 'extra'"),
        (lambda s: s.replace("[[probe]]", "[[probe]", 1), "not valid TOML"),
    ],
    ids=["unknown-key", "unknown-expect-key", "bad-category", "chat-and-completion", "bad-regex",
         "duplicate-name", "unknown-top-level", "bad-toml"],
)
def test_strict_errors_name_file_and_key(tmp_path: Path, mutate, message: str) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / "bad.toml"
    f.write_text(mutate(GOOD))
    with pytest.raises(ProbeFileError, match=message) as e:
        load_probe_file(f)
    assert str(f) in str(e.value)


def test_unknown_suite_lists_known_ones() -> None:
    with pytest.raises(ProbeFileError, match="Known suites: .*default"):
        resolve_suite("nope")


PROBE = '''
[[probe]]
name = "p1"
category = "counting"
messages = [{ role = "user", content = "Count." }]
'''


@pytest.mark.parametrize(
    "extra, match",
    [
        ('[probe.expect]\ncontains = "abc"\n', "'expect.contains' must be a non-empty list of strings; got 'abc'"),
        ("[probe.expect]\nexact = 7\n", "'expect.exact' must be a string; got 7"),
        ('[probe.expect]\ntool_count = "one"\n', "'expect.tool_count' must be a non-negative integer; got 'one'"),
        ("[probe.expect]\ntool_count = true\n", "'expect.tool_count' must be a non-negative integer"),
        ("[probe.expect]\ntool_names = [1]\n", "'expect.tool_names' must be a list of strings"),
        ("[probe.expect]\nregex = 5\n", "'expect.regex' must be a string"),
    ],
    ids=["contains-str", "exact-int", "tool_count-str", "tool_count-bool", "tool_names-int", "regex-int"],
)
def test_expect_fields_are_typed_at_load(tmp_path: Path, extra: str, match: str) -> None:
    """Issue 19 item 8: mistyped expect fields loaded fine and failed at judge time on the base arm,
    turning the probe NOT_DISCRIMINATING."""
    f = tmp_path / "s.toml"
    f.write_text(PROBE + extra)
    with pytest.raises(ProbeFileError) as e:
        load_probe_file(f)
    assert str(f) in str(e.value) and "probe 'p1'" in str(e.value) and match in str(e.value)


def test_unknown_gate_name_is_refused_with_the_closest(tmp_path: Path) -> None:
    """Issue 13 item 5: `gates = ["degenracy"]` was dropped silently, so the probe was judged by nothing."""
    f = tmp_path / "s.toml"
    f.write_text(PROBE.replace('content = "Count." }]', 'content = "Count." }]\ngates = ["content", "degenracy"]'))
    with pytest.raises(ProbeFileError, match=r"probe 'p1': unknown gate 'degenracy' in 'gates' \(did you mean "
                                             r"'degeneracy'\?") as e:
        load_probe_file(f)
    assert str(f) in str(e.value)
    f.write_text(PROBE.replace('content = "Count." }]', 'content = "Count." }]\ngates = ["token_diff"]'))
    with pytest.raises(ProbeFileError, match="'token_diff' in 'gates' is a pair gate"):
        load_probe_file(f)


def test_bad_suite_exits_3_in_one_line(tmp_path: Path) -> None:
    """Issue 19 item 8 at the command line: exit 3 naming file, probe and field, before anything runs."""
    from click.testing import CliRunner

    from observatory.cli import cli

    f = tmp_path / "s.toml"
    f.write_text(PROBE + "[probe.expect]\nexact = 7\n")
    r = CliRunner().invoke(cli, ["compare", "--arms", "base=http://127.0.0.1:9", "--suite", str(f),
                                 "--db", str(tmp_path / "x.db"), "--quiet"])
    assert r.exit_code == 3 and len(r.output.strip().splitlines()) == 1
    assert str(f) in r.output and "'expect.exact'" in r.output
    assert not (tmp_path / "x.db").exists()
