"""fogsim: write a decentralized algorithm once, run it simulated or distributed."""
