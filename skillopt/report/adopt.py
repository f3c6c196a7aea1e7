"""`skillopt adopt RUN`: install the run's accepted skill where the agent finds it, keeping a
backup of the skill it replaces.

Claude Code reads `<project>/.claude/skills/<name>/`, Codex `<project>/.agents/skills/<name>/`
(with `--user`, the project is the home folder: `~/.claude/skills`, `~/.agents/skills`). The old
folder moves to `<project>/.skillopt/backups/<name>-<UTC time>/` (outside the skills folder, so the
agent never discovers the backup as a second skill); `provenance.json` beside the new SKILL.md
says which run and version it came from.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from skillopt.errors import BadInput
from skillopt.store.refs import SkillRef

SKILL_DIRS = {"claude-code": (".claude/skills", "claude-skill"), "codex": (".agents/skills", "codex-skill")}
BACKUPS = ".skillopt/backups"


@dataclass(frozen=True)
class Adopted:
    path: Path  # the installed skill folder
    backup: Path | None  # where the replaced one went
    label: str  # RUN:vNNN
    warnings: tuple[str, ...] = ()


def adopt(ref: SkillRef, project: Path, harness: str | None = None, allow_seed: bool = False,
          now: float | None = None) -> Adopted:
    from skillopt.report.export import export_skill, provenance_for

    prov = provenance_for(ref)
    harness = harness or prov.harness
    if harness not in SKILL_DIRS:
        raise BadInput(f"cannot tell where {ref.label} goes (its harness is {harness or 'unknown'}): "
                       f"pass --harness {' or '.join(SKILL_DIRS)}")
    if ref.run is not None and ref.version == 0 and not allow_seed:
        raise BadInput(f"run {ref.run.run_id} accepted no edit: its best skill is the seed, nothing to adopt "
                       f"(adopt {ref.run.run_id}:v0 to install the seed anyway)")
    rel, fmt = SKILL_DIRS[harness]
    skills = Path(project) / rel
    tmp = Path(tempfile.mkdtemp(prefix="skillopt-adopt-", dir=_existing(Path(project))))
    try:
        result = export_skill(ref.skill, fmt, tmp, prov)
        dest = skills / result.skill_name
        backup = None
        if dest.exists() or dest.is_symlink():
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now if now is not None else time.time()))
            backup = Path(project) / BACKUPS / f"{result.skill_name}-{stamp}"
            n = 1
            while backup.exists():
                n += 1
                backup = backup.with_name(f"{result.skill_name}-{stamp}-{n}")
            backup.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(dest), str(backup))
        skills.mkdir(parents=True, exist_ok=True)
        shutil.move(str(result.root), str(dest))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return Adopted(dest, backup, ref.label, tuple(result.warnings))


def _existing(path: Path) -> Path:
    """The folder itself when it exists, else its nearest existing parent (a temporary folder on
    the same file system, so the final move is a rename)."""
    path = path.resolve()
    while not path.exists():
        path = path.parent
    return path
