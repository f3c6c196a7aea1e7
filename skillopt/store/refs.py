"""Skill references: `PATH`, `RUN`, `RUN:vN`, `RUN:best`, `RUN:final`, `RUN:seed`. One resolver."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from skillopt.errors import BadInput
from skillopt.skill import Skill
from skillopt.store.run_store import RunStore

_VERSION = re.compile(r"^v?(\d+)$")


@dataclass(frozen=True)
class SkillRef:
    skill: Skill
    label: str
    run: RunStore | None = None
    version: int | None = None


def resolve_skill_ref(ref: str, runs_dir: Path) -> SkillRef:
    path = Path(ref)
    if path.suffix.lower() == ".md" or path.is_file():
        return SkillRef(Skill.load(path), str(path))
    run_id, _, which = ref.partition(":")
    store = RunStore.open(runs_dir, run_id)
    version = pick_version(store, which or "best", ref)
    return SkillRef(store.skill(version), f"{run_id}:v{version:03d}", store, version)


def pick_version(store: RunStore, which: str, ref: str) -> int:
    """The version number `which` (`best`, `final`, `seed`, `vN`, `N`) names in `store`; else `BadInput`."""
    state = store.read_state()
    if which in ("best", "final", "seed"):
        if which == "seed":
            return 0
        if state is None:
            return 0
        return state.best if which == "best" else state.incumbent
    m = _VERSION.match(which)
    if not m:
        raise BadInput(f"bad skill reference {ref!r}: write RUN, RUN:vN, RUN:best, RUN:final or a SKILL.md path")
    n = int(m.group(1))
    store.version(n)  # raises BadInput when missing
    return n
