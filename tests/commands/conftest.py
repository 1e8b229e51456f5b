"""Tests of the commands (observatory/commands/, observatory/cli.py): every command documents itself and its
OBSERVATORY_* variables, `gate` and `gates` exit codes and artefacts, setup errors in one line before anything
runs, and what a new user or a CI maintainer trips on first. Servers are the stubs of tests/support/.
"""
