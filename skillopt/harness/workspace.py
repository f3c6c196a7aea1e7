"""Workspace preparation shared by all harnesses: a fresh folder per rollout."""

from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

from skillopt.benchmarks.base import Benchmark, Task
from skillopt.skill import Skill


def write_skill(ws: Path, skill: Skill, skill_dir: str | None) -> Path | None:
    """Write the skill where the harness discovers it natively (e.g. `.claude/skills`)."""
    if not skill_dir:
        return None
    path = ws / skill_dir / skill.name / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(skill.strip_markers().render(), encoding="utf-8")  # as it will be deployed: no markers
    return path


@contextmanager
def workspace(task: Task, skill: Skill, benchmark: Benchmark, skill_dir: str | None,
              root: Path | None = None, keep: bool = False, name: str | None = None):
    """A fresh folder holding what the agent may see: the skill, the task's files. Never hidden data.

    `name`: that folder under `root`, emptied first (rollouts that take turns on one name see the same
    path); else a new temporary name.
    """
    if root is not None:
        root.mkdir(parents=True, exist_ok=True)
    if name is not None and root is not None:
        ws = root / name
        shutil.rmtree(ws, ignore_errors=True)  # what an interrupted rollout left
        ws.mkdir()
    else:
        ws = Path(tempfile.mkdtemp(prefix="ws-", dir=root))
    try:
        for rel, content in task.files.items():
            p = ws / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(content, encoding="utf-8")
        benchmark.prepare(task, ws)
        write_skill(ws, skill, skill_dir)
        yield ws
    finally:
        if not keep:
            shutil.rmtree(ws, ignore_errors=True)
