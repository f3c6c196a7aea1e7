"""The rollout runner's workspaces: fixed folder names taken in turn, emptied between rollouts,
and never reused after a harness that did not return."""

from __future__ import annotations

import asyncio
from pathlib import Path

from skillopt.benchmarks.registry import get_benchmark
from skillopt.config import resolve_config
from skillopt.engine.events import Emitter
from skillopt.engine.rollouts import RolloutRunner
from skillopt.engine.settings import settings_that_matter
from skillopt.harness.base import Limits, Rollout, RolloutOutput
from skillopt.models.meter import Meter
from skillopt.models.spec import parse_model_spec
from skillopt.skill import Skill
from skillopt.store.run_store import RunStore

SAMPLE = Path(__file__).resolve().parent.parent / "benchmarks" / "sample_qa.jsonl"
SKILL = Skill.parse("---\nname: solver\ndescription: Solve it.\n---\n# Solver\nThink.\n")


class FolderHarness:
    """Notes the folder of each rollout and what it found there; a task named `hang-*` never returns."""

    name = "folders"
    skill_dir = ".claude/skills"

    def __init__(self) -> None:
        self.seen: list[tuple[str, Path, set[str]]] = []

    async def run(self, task, skill, ws, target, limits) -> Rollout:
        found = {p.relative_to(ws).as_posix() for p in ws.rglob("*") if p.is_file()}
        self.seen.append((task.id, ws, found))
        (ws / f"left-by-{task.id}").write_text("x")
        await asyncio.sleep(3600 if task.id.startswith("hang-") else 0.05)
        return Rollout(task_id=task.id, output=RolloutOutput(text="Answer: 0"))


def test_rollouts_take_turns_on_fixed_folders_and_retire_a_hung_one(tmp_path):
    store = RunStore.create(tmp_path / "runs", "lanes")
    dead = next(p for p in range(4_000_000, 4_100_000) if not Path(f"/proc/{p}").exists())
    (store.root / "work" / f"lane-{dead}-0" / "src").mkdir(parents=True)  # what a killed run left
    harness, benchmark = FolderHarness(), get_benchmark(SAMPLE)
    cfg = resolve_config({"benchmark": str(SAMPLE), "target_model": "openai:gpt-5-mini"})
    runner = RolloutRunner(store, harness, benchmark, parse_model_spec("openai:gpt-5-mini"),
                           Limits(timeout_s=0.1), Meter(), Emitter(), concurrency=2,
                           settings=settings_that_matter(cfg, benchmark, harness))
    runner.executor.grace_s = 0.2
    tasks = list(benchmark.tasks("train")) + list(benchmark.tasks("val"))
    first, later = tasks[:6], tasks[6:8]
    hang = first[0].model_copy(update={"id": "hang-1"})

    async def go():
        await runner.run_many(SKILL, 0, first, "train")
        await runner.run_many(SKILL, 0, [hang], "train")
        await runner.run_many(SKILL, 0, later, "val")

    asyncio.run(go())
    folders = [ws for _, ws, _ in harness.seen]
    assert len(set(folders[:6])) == 2  # 6 rollouts, 2 at a time: 2 folders, each used in turn
    assert all(ws.parent == store.root / "work" for ws in folders)
    hung = folders[6]
    assert hung not in folders[7:]  # its agent may still be at work there
    for task_id, _, found in harness.seen:  # each starts from a clean folder: the skill and task, no leftovers
        assert ".claude/skills/solver/SKILL.md" in found and not any(f.startswith("left-by-") for f in found), \
            (task_id, found)
    assert not (store.root / "work" / f"lane-{dead}-0").exists()
    recs = {r.task_id: r for r in store.rollouts()}
    assert "timed out" in (recs["hang-1"].error or "") and all(recs[t.id].error is None for t in later)
