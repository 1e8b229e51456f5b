"""One compare session: the plan validated before anything launches, the runner, one arm's measurement, the judge step."""
