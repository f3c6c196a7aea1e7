"""Workspace preparation shared by all harnesses: a fresh folder per rollout."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from skillopt.benchmarks.base import Benchmark, Task
from skillopt.errors import BadInput
from skillopt.skill import Skill


def inside(rel: str) -> bool:
    """Whether a relative path stays inside the folder it is relative to (no `..`, not absolute)."""
    p = PurePosixPath(rel.replace("\\", "/"))
    return bool(p.parts) and not p.is_absolute() and ".." not in p.parts


def check_task_paths(tasks: Iterable[Task]) -> None:
    """Every file a task puts in its workspace stays inside it; else `BadInput` naming the task."""
    for task in tasks:
        for rel in task.files:
            if not inside(rel):
                raise BadInput(f"task {task.id!r} has a file {rel!r} outside its workspace: file names must be "
                               "relative paths without '..'")


def check_skill_name(skill: Skill) -> None:
    """A skill's name is the name of its folder in the workspace: one safe path part."""
    name = skill.name
    if not name or "/" in name or "\\" in name or name.startswith(".") or "\0" in name:
        raise BadInput(f"bad skill name {name!r}: use lowercase letters, digits and hyphens (it names a folder)")


def write_skill(ws: Path, skill: Skill, skill_dir: str | None) -> Path | None:
    """Write the skill where the harness discovers it natively (e.g. `.claude/skills`): SKILL.md as it
    will be deployed (no markers) and, for a folder skill, its supporting files beside it."""
    if not skill_dir:
        return None
    check_skill_name(skill)
    folder = ws / skill_dir / skill.name
    if folder.is_dir() and not folder.is_symlink():  # a reused workspace: no file of another version stays
        shutil.rmtree(folder)
    return skill.strip_markers().write_folder(folder)


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
        check_task_paths([task])
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
