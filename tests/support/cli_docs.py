"""Commands a document shows, checked against the real CLI: every subcommand and flag must exist."""

from __future__ import annotations

import shlex

import click

from observatory.cli import cli


def unknown(command: str) -> list[str]:
    """What in COMMAND is not a real observatory subcommand or flag of it."""
    words = shlex.split(command)
    assert words[0] == "observatory"
    group = cli
    assert isinstance(group, click.Group)
    sub = group.get_command(click.Context(group), words[1])  # the group may load its commands lazily
    if sub is None:
        return [words[1]]
    flags = {o for p in sub.params for o in (*p.opts, *p.secondary_opts)}
    return [w.split("=", 1)[0] for w in words[2:] if w.startswith("--") and w.split("=", 1)[0] not in flags]
