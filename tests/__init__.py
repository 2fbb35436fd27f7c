"""fogsim's test suite (a package: helpers are imported as ``tests.<module>``)."""
