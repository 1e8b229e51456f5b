"""The nouns every phase shares: arms, probes, roles, the read model, errors and the one vocabulary."""
