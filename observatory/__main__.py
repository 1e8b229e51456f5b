"""python -m observatory."""

from observatory.cli import cli

cli()
