"""Import every command group so it registers on the root app."""

from skillopt.cli import benchmarks, run, runs  # noqa: F401
