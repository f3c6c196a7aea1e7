"""Harnesses run a target agent on a task with a skill and return a Rollout."""

from skillopt.harness.base import Harness, Limits, Rollout, Usage
from skillopt.harness.registry import HarnessContext, check_compatible, harness, list_harnesses, make_harness

__all__ = ["Harness", "HarnessContext", "Limits", "Rollout", "Usage", "check_compatible", "harness",
           "list_harnesses", "make_harness"]
