"""fogsim's benchmark scripts; ``python -m benchmarks`` runs them all (see __main__)."""
