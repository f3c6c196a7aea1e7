"""Import every command group so it registers on the root app."""

from skillopt.cli import benchmarks, models, run, runs, traces  # noqa: F401
