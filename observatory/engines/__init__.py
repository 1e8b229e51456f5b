"""Serving engines: how each is launched (processes, containers, images), what it reports (counters, facts), its triage knobs."""
