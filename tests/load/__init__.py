"""Many simulated workers and watchers on one control plane: correctness under load."""
