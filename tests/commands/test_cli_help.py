"""`observatory --help` lists every OBSERVATORY_* environment variable the code and scripts/ read (issue 30.8)."""

from __future__ import annotations

import re

from click.testing import CliRunner

from observatory.cli import cli
from observatory.engines.arm_engines import env_vars
from observatory.model.env_vars import listed
from tests.support.paths import REPO

PACKAGE = REPO / "observatory"


def test_help_lists_every_environment_variable() -> None:
    files = [*PACKAGE.rglob("*.py"), *(PACKAGE.parent / "scripts").glob("*.sh")]  # what users run, scripts too
    used = {m for f in files for m in re.findall(r"OBSERVATORY_[A-Z][A-Z_]*[A-Z]", f.read_text())}
    assert "OBSERVATORY_DB" in used and len(used) >= 8  # the grep itself works
    known = listed(env_vars())  # the package's and every engine's own (its adapter's env_vars)
    assert used <= set(known), sorted(used - set(known))
    r = CliRunner().invoke(cli, ["--help"])
    assert r.exit_code == 0
    for name in used:
        assert re.search(rf"^\s+{name}\s+\S", r.output, re.M), (name, r.output)
    # the negative control: a name the code does not read is not in the help
    assert "OBSERVATORY_NOT_A_VARIABLE" not in r.output
