"""What people and CI read: the session view, HTML report, charts, terminal, JUnit, JSON, history, output folders."""
