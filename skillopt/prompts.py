"""Jinja2 templates for optimizer and harness prompts, kept in the top-level `prompts/` folder."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import jinja2

if TYPE_CHECKING:
    from skillopt.skill import Skill

PROMPTS_DIR = Path(__file__).resolve().parent.parent / "prompts"


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(PROMPTS_DIR)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=False,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


def render(name: str, **values) -> str:
    return _env().get_template(name).render(**values).strip()


def chat_system(skill: Skill) -> str:
    """The system prompt a chat rollout sends for `skill` (the skill as deployed: markers stripped).
    The chat harness, the demonstration teacher and the perf scripts all send this one."""
    return render("chat_system.md.j2", skill=skill.strip_markers())
