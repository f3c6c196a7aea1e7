"""The optimizer: reflect, aggregate, select (learning rate + schedule), gate, consolidate."""

from skillopt.optimizer.aggregate import aggregate, select
from skillopt.optimizer.consolidate import consolidate
from skillopt.optimizer.gate import PairedGate
from skillopt.optimizer.reflect import make_minibatches, reflect
from skillopt.optimizer.schedule import make_schedule
from skillopt.optimizer.types import GateDecision, Reflection, ScoredRollout

__all__ = ["GateDecision", "PairedGate", "Reflection", "ScoredRollout", "aggregate", "consolidate",
           "make_minibatches", "make_schedule", "reflect", "select"]
