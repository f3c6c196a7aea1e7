"""The training loop, rollout scheduling (async, cached, budgeted) and resume."""
