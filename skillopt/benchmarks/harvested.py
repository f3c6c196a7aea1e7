"""`harvest`: the tasks `skillopt harvest` mined from the user's own sessions, as a benchmark.

    skillopt run --benchmark harvest:OUT ...      (OUT: the folder `harvest -o OUT` wrote)

A task is the session's request in a workspace rebuilt from its start state (the files of the
commit the session started from, copied from the session's repository on this machine), scored
by its check:

- `test_command`: the test files the session changed are put in place, then the command runs in
  the workspace after the agent (`bash -c`, a timeout, resource limits, own process group, the
  run's sandbox); exit code 0 passes;
- `file_state`: the fraction of the expected lines found in the expected files (all: pass);
- `rubric`: `skillopt.judge` grades the answer against the task's rubric, with the answer the
  user accepted as the reference; only with option `judge_model` (else those tasks are left out).

Tasks with no check (or whose workspace cannot be rebuilt) are left out: they stay in
tasks.jsonl for reading. Splits, the sealed test split, compare and export work as for any
benchmark.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import tempfile
from functools import cached_property
from pathlib import Path
from typing import Any

from skillopt.benchmarks.base import RolloutOutput, Score, SplitSizes, SplitTasks, Task
from skillopt.benchmarks.registry import benchmark
from skillopt.benchmarks.limits import ResourceLimits, minimal_env, run_limited
from skillopt.errors import BadInput
from skillopt.harvest.schema import HarvestedTask
from skillopt.sandbox import Sandbox, interpreter_paths

SCORER_VERSION = "harvest-1"


def to_task(h: HarvestedTask) -> Task:
    prompt = h.request if not h.follow_ups else h.request + "\n\n" + "\n\n".join(h.follow_ups)
    needs_ws = h.check.kind in ("test_command", "file_state")
    return Task(id=h.id, prompt=prompt, kind="code" if needs_ws else "qa",
                answers=(h.final_answer,) if h.check.kind == "rubric" and h.final_answer else (),
                metadata={"harvested_from": h.session.harness, "check": h.check.kind,
                          "confidence": h.check.confidence},
                hidden={"check": h.check.model_dump(mode="json"), "cwd": h.start.cwd, "commit": h.start.commit})


class HarvestBenchmark(SplitTasks):
    """Harvested tasks scored by their own checks (see the module docstring)."""

    max_answer_tokens = 4096

    def __init__(self, tasks: list[HarvestedTask], sizes: SplitSizes | None = None, name: str = "harvest",
                 judge_model: str | None = None, test_timeout_s: float = 300.0, memory_mb: int = 4096):
        self.name, self.sizes = name, sizes or SplitSizes()
        self.judge = None
        if judge_model:
            from skillopt.benchmarks.judge import JudgeScorer

            self.judge = JudgeScorer(rubric="(each task's own)", model=judge_model)
        keep = [t for t in tasks if t.scored or (t.check.kind == "rubric" and self.judge is not None)]
        if not keep:
            raise BadInput("no harvested task can be scored (they have no check, or their repositories are gone): "
                           "see harvest.json, or give --set benchmark_options.judge_model=... for rubric tasks")
        self._tasks = [to_task(t) for t in keep]
        self.test_timeout_s, self.limits = test_timeout_s, ResourceLimits(memory_mb=memory_mb)
        self.scorer_version = SCORER_VERSION + (f"+{self.judge.version}" if self.judge else "")
        self.sandbox: Sandbox | None = None
        self._setup_errors: dict[str, str] = {}

    @cached_property
    def _by_id(self) -> dict[str, Task]:
        return {t.id: t for t in self._tasks}

    def isolate(self, sandbox: Sandbox, artefacts: Path) -> None:
        """Test commands (code the agent changed) run in `sandbox` (`RunsUntrustedCode`)."""
        self.sandbox = sandbox

    # UsesModels, for rubric tasks
    def model_specs(self) -> dict[str, str]:
        return self.judge.model_specs() if self.judge else {}

    def bind_models(self, models: Any) -> None:
        if self.judge:
            self.judge.bind_models(models)

    def prepare(self, task: Task, ws: Path) -> None:
        """The files of the start commit, from the session's repository (no history: the
        workspace's own base commit is made by the harness). A failure is scored, never raised."""
        cwd, commit = task.hidden.get("cwd"), task.hidden.get("commit")
        if task.kind != "code" or not cwd or not commit:
            return
        from skillopt.benchmarks.swe_local import SetupError, clone_at, copy_tree

        tmp = Path(tempfile.mkdtemp(prefix="harvest-src-"))
        try:
            clone_at(str(Path(cwd).expanduser()), commit, tmp / "repo")
            copy_tree(tmp / "repo", Path(ws))
        except (SetupError, OSError, subprocess.SubprocessError) as e:
            self._setup_errors[str(Path(ws).resolve())] = str(e)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    async def score(self, task: Task, out: RolloutOutput, ws: Path) -> Score:
        err = self._setup_errors.pop(str(Path(ws).resolve()), None)
        if err:
            return Score(hard=0, soft=0, feedback=f"the workspace could not be rebuilt, nothing was graded: {err}")
        check = task.hidden["check"]
        if check["kind"] == "test_command":
            place_test_files(check.get("test_files") or {}, Path(ws))
            return await asyncio.to_thread(self.run_test, check["command"], Path(ws))
        if check["kind"] == "file_state":
            return file_state_score(check["files"], Path(ws))
        if self.judge is None:
            raise RuntimeError(f"task {task.id} has a rubric check and the benchmark no judge model")
        from skillopt.benchmarks.judge import JudgeScorer

        scorer = JudgeScorer(rubric=check["rubric"], model=str(self.judge.spec))
        scorer.bind_models(self.judge.models)
        return await scorer(task, out.text)

    def run_test(self, command: str, ws: Path) -> Score:
        """The session's test command in the workspace; exit code 0 passes (blocking)."""
        home = Path(tempfile.mkdtemp(prefix="harvest-home-"))
        wrap = None
        if self.sandbox is not None:
            sandbox, shown = self.sandbox, interpreter_paths(sys.executable)

            def wrap(argv: list[str]) -> list[str]:
                return sandbox.wrap(argv, ws, read_only=shown, network=False)
        try:
            run = run_limited(["bash", "-c", command], cwd=ws, timeout_s=self.test_timeout_s, env=minimal_env(home),
                              limits=self.limits, wrap=wrap)
        finally:
            shutil.rmtree(home, ignore_errors=True)
        tail = "\n".join(run.output.strip().splitlines()[-15:])[-1200:]
        if run.timed_out:
            return Score(hard=0, soft=0, feedback=f"`{command}` timed out after {self.test_timeout_s:.0f}s\n{tail}")
        if run.returncode == 0:
            return Score(hard=1, soft=1, feedback=f"`{command}` passed")
        return Score(hard=0, soft=0, feedback=f"`{command}` failed (exit code {run.returncode}):\n{tail}")


def place_test_files(files: dict[str, str | None], ws: Path) -> None:
    """The session's test files over whatever the agent left there (None: the session deleted it)."""
    root = ws.resolve()
    for rel, text in files.items():
        path = (ws / rel).resolve()
        if root not in path.parents:  # a path out of the workspace: never written
            continue
        if path.is_symlink() or (text is None and path.exists()):
            path.unlink()
        if text is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")


def file_state_score(files: dict[str, list[str]], ws: Path) -> Score:
    found, total, missing = 0, 0, []
    for rel, lines in files.items():
        path = ws / rel
        have = {ln.strip() for ln in path.read_text(encoding="utf-8", errors="replace").splitlines()} \
            if path.is_file() and not path.is_symlink() else set()
        for ln in lines:
            total += 1
            if ln.strip() in have:
                found += 1
            elif len(missing) < 3:
                missing.append(f"{rel}: {ln.strip()[:120]}")
    soft = found / total if total else 0.0
    if total and found == total:
        return Score(hard=1, soft=1, feedback="every expected line is in place")
    return Score(hard=0, soft=soft, feedback=f"{found}/{total} expected lines found; missing: " + "; ".join(missing))


@benchmark("harvest", description="Tasks harvested from your own Claude Code / Codex sessions (harvest:OUT)")
def _harvest(sizes: SplitSizes, path: str | None = None, judge_model: str | None = None,
             test_timeout_s: float = 300.0, memory_mb: int = 4096) -> HarvestBenchmark:
    if not path:
        raise BadInput("the harvest benchmark needs its folder: --benchmark harvest:OUT "
                       "(what `skillopt harvest -o OUT` wrote)")
    from skillopt.harvest.pipeline import read_tasks

    return HarvestBenchmark(read_tasks(Path(path)), sizes, judge_model=judge_model, test_timeout_s=test_timeout_s,
                            memory_mb=memory_mb)


def verify_check(task: HarvestedTask, timeout_s: float) -> HarvestedTask:
    """Run a test-command check on the untouched start state (rebuilt as this benchmark does, the
    session's test files in place; `harvest --verify`): one that passes there cannot tell a fix from none,
    and drops to low confidence; one that fails keeps its confidence, now verified."""
    bench = HarvestBenchmark([task], SplitSizes(train=0, val=0, test=None), test_timeout_s=timeout_s)
    ws = Path(tempfile.mkdtemp(prefix="skillopt-verify-"))
    try:
        t = bench.tasks("all")[0]
        bench.prepare(t, ws)
        score = asyncio.run(bench.score(t, RolloutOutput(), ws))
    finally:
        shutil.rmtree(ws, ignore_errors=True)
    if score.hard:
        why = task.check.why + "; verified: it passes on the start state unchanged"
        check = task.check.model_copy(update={"confidence": "low", "why": why})
    else:
        check = task.check.model_copy(update={"why": task.check.why + "; verified: it fails on the start state"})
    return task.model_copy(update={"check": check})
