"""skillopt: train agent skills (SKILL.md) with rollouts, reflection and gated edits."""

__version__ = "0.1.0"
