"""Judging stored results: gates, the verdict policy, acceptance and speed figures, performance checks, statistics."""
