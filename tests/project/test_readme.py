"""The README a new user reads (issue 50 item 1): short, its first two commands the ones that work, every
command, flag and path it names real."""

from __future__ import annotations

import re
import shlex
import struct

from tests.support.cli_docs import unknown
from tests.support.paths import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")
ELSEWHERE: set[str] = set()  # paths a README may name before they land (none now)


def _blocks() -> list[str]:
    return re.findall(r"```sh\n(.*?)```", README, re.S)


def test_it_is_short() -> None:
    assert len(README.split()) < 1500


def test_its_first_two_commands_set_up_and_run_then_set_up_and_test() -> None:
    first, second = _blocks()[:2]
    assert first.strip() == "bash scripts/setup.sh && .venv/bin/observatory compare --arms base,mtp1,mtp2"
    ci = (REPO / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert second.strip() == ci == "bash scripts/setup.sh --test && .venv/bin/python -m pytest"


def test_every_observatory_command_and_flag_it_shows_exists() -> None:
    lines = [" ".join(x.split("#")[0].replace("\\\n", " ").split()) for b in _blocks() for x in
             b.replace("\\\n", " ").splitlines()]
    commands = [x for x in lines if x.startswith("observatory ")]
    assert len(commands) >= 5
    for c in commands:
        assert unknown(c) == [], c
    assert unknown("observatory compare --no-such-flag") == ["--no-such-flag"]  # the checker's control
    for word in re.findall(r"`(observatory [a-z]+)", README):
        assert unknown(word) == [], word
    assert shlex.split(commands[0])[0] == "observatory"


def test_every_path_it_names_exists() -> None:
    named = set(re.findall(r"(?<![\w/.])((?:docs|examples|scripts|probes|observatory)/[\w./-]*\w)", README))
    named |= {m for m in re.findall(r"\]\(([^)#]+)", README) if not m.startswith("http")}
    assert "docs/img/report.png" in named and "docs/ci.md" in named
    missing = sorted(p for p in named - ELSEWHERE if not (REPO / p).exists())
    assert missing == [], missing


def test_the_screenshot_is_a_1400_px_png() -> None:
    head = (REPO / "docs" / "img" / "report.png").read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", head[16:24])
    assert width == 1400 and 600 <= height <= 2000
    assert (REPO / "docs" / "img" / "report.png").stat().st_size < 200_000


def test_the_glossary_it_links_has_every_figure() -> None:
    glossary = (REPO / "docs" / "design.md").read_text(encoding="utf-8").split("## 7. Glossary", 1)[1]
    assert "(docs/design.md#7-glossary)" in README
    for term in ("alpha", "tau", "S", "near-tie", "S_step", "TTFT", "TPOT", "ITL", "E2EL", "BURSTY", "KNOWN", "NOTE",
                 "A/A"):
        assert f"\n| {term} |" in glossary, term
