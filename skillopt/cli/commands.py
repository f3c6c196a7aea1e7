"""Import every command group so it registers on the root app."""

from skillopt.cli import benchmarks, compare, config_cmd, export, harvest, models, report, run, runs, traces  # noqa: F401
