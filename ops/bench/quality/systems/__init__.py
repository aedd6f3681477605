"""Systems under test: memstrata, raw-turn baselines, the mem0 peer."""
