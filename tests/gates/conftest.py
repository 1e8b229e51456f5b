"""Tests of the gates: the built-in gate files of the top-level gates/ folder, loaded by path through the contract
and registry of observatory/model/gates.py, each on plain outputs with its negative control; the registry's
refusals; user gates from --gates-dir taking the same path. How the judge applies gates to a session is judge/.
"""
