"""`swe-local`: SWE-style tasks whose hidden tests run on this machine, with no Docker.

A task is a SWE-bench row (see `swe_grading.SweInstance`): a git repository at `base_commit`, a
problem statement, a hidden `test_patch`, and FAIL_TO_PASS / PASS_TO_PASS lists. The row's
`source` (a git bundle, a repository path or URL, relative to the task file) holds the repository;
without one it is `https://github.com/<repo>.git`, so real SWE-bench rows drop in (they then need
their own Python environment: option `python`).

- `prepare` writes the files of `base_commit` into the workspace (copied from a fresh clone: no
  hidden tests, no gold patch) and makes them a fresh repository with a single commit, so `git log -p` cannot
  show the original code. The commit's author, date and message are fixed, so for the shipped
  tasks (whose base commits are root commits made the same way) HEAD equals `base_commit`.
- `score` grades `out.patch` (else the workspace's `git diff`, new files included) in a fresh
  clone: apply the patch with SWE-bench's fallbacks, reset the files the test patch touches, apply
  the test patch, run the test command on its files (timeout, resource limits, own process group),
  then parse and grade the log with `swebench` (`swe_grading.grade_log`).

The shipped task set lives in `benchmarks/swe_local/` (`tasks.jsonl` and one git bundle per package
version); `skillopt benchmarks make-swe` makes more (see `make_swe`).
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path

from skillopt.benchmarks.base import RolloutOutput, Score, SplitSizes, SplitTasks, Task
from skillopt.benchmarks.registry import benchmark
from skillopt.benchmarks.limits import ResourceLimits, minimal_env, run_limited
from skillopt.git import apply_with_fallbacks, base_commit, git, local_runner
from skillopt.benchmarks.swe_grading import (
    APPLY_PATCH_FAIL,
    APPLY_PATCH_PASS,
    RESET_FAILED,
    GradeReport,
    SweInstance,
    compose_log,
    grade_log,
    grading,
    instance_of,
    load_instances,
    patch_files,
    rollout_patch,
    swe_task,
    write_logs,
)
from skillopt.errors import BadInput
from skillopt.sandbox import Sandbox, interpreter_paths
from skillopt.io.files import atomic_write_text
from skillopt.io.names import safe_name

SHIPPED_TASKS = Path(__file__).resolve().parents[2] / "benchmarks" / "swe_local" / "tasks.jsonl"
DEFAULT_TEST_CMD = ("python", "-m", "pytest", "-rA", "-p", "no:cacheprovider")
DEFAULT_TIMEOUT_S = 300.0


class SetupError(Exception):
    """The repository could not be cloned or checked out (a scored failure, not a crash)."""


# ---------------------------------------------------------------- repositories


def resolve_source(inst: SweInstance, base_dir: Path | None) -> str:
    """Where the repository comes from: the row's `source` (relative to the task file), else GitHub."""
    if inst.source:
        if "://" in inst.source or inst.source.startswith("git@"):
            return inst.source
        path = Path(inst.source)
        return str(path if path.is_absolute() or base_dir is None else (base_dir / path).resolve())
    return f"https://github.com/{inst.repo}.git"


class RepoCache:
    """Local mirrors of remote repositories, so each grading clones from disk. Local paths and
    bundles are cloned directly."""

    def __init__(self, root: Path | None = None):
        self.root = root
        self._lock = threading.Lock()

    def local(self, source: str, commit: str) -> str:
        if "://" not in source and not source.startswith("git@"):
            if not Path(source).exists():
                raise SetupError(f"repository {source} not found")
            return source
        root = self.root or Path(tempfile.gettempdir()) / "skillopt-repos"
        mirror = root / hashlib.sha256(source.encode()).hexdigest()[:16]
        with self._lock:
            try:
                if not mirror.exists():
                    root.mkdir(parents=True, exist_ok=True)
                    git(root, "clone", "-q", "--mirror", source, str(mirror), timeout=1800)
                elif git(mirror, "cat-file", "-e", f"{commit}^{{commit}}", check=False).returncode != 0:
                    git(mirror, "fetch", "-q", "origin", timeout=1800)
            except (OSError, subprocess.SubprocessError) as e:
                raise SetupError(f"could not clone {source}: {_why(e)}") from None
        return str(mirror)


def _why(e: BaseException) -> str:
    if isinstance(e, subprocess.CalledProcessError):
        text = (e.stderr or e.stdout or "").strip().splitlines()
        return text[-1] if text else f"exit code {e.returncode}"
    return f"{type(e).__name__}: {e}"


def clone_at(source: str, commit: str, dest: Path) -> None:
    """A fresh clone of `source` with `commit` checked out (detached) in `dest`."""
    try:
        git(dest.parent, "clone", "-q", "--no-checkout", source, str(dest), timeout=1800)
        git(dest, "checkout", "-q", "--detach", commit)
    except (OSError, subprocess.SubprocessError) as e:
        raise SetupError(f"could not check out {commit[:12]} from {source}: {_why(e)}") from None


def copy_tree(repo: Path, dest: Path) -> None:
    """The checked-out files of a clone (no `.git`) into `dest`."""
    shutil.copytree(repo, dest, symlinks=True, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".git"))


def fresh_repository(path: Path, message: str) -> str:
    """Make `path` a new repository whose one commit holds its files (even those its .gitignore
    names); returns the commit id."""
    return base_commit(path, message, force=True)


def commit_message(inst: SweInstance) -> str:
    """The message of a task's base commit (and of the workspace's one commit)."""
    return f"{inst.repo} {inst.version}".strip()


def materialize(inst: SweInstance, source: str, ws: Path) -> str:
    """Write the base commit's files into `ws` as a one-commit repository; returns HEAD."""
    tmp = Path(tempfile.mkdtemp(prefix="swe-src-"))
    try:
        clone_at(source, inst.base_commit, tmp / "repo")
        copy_tree(tmp / "repo", ws)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return fresh_repository(ws, commit_message(inst))


# ---------------------------------------------------------------- grading


def apply_patch(repo: Path, patch_file: Path) -> tuple[bool, str]:
    """Apply with SWE-bench's fallbacks, resetting the tree between attempts."""
    return apply_with_fallbacks(str(patch_file), local_runner(repo))


def reset_test_files(repo: Path, inst: SweInstance) -> None:
    """Put the files the test patch touches back to their base state (absent when new)."""
    for rel in patch_files(inst.test_patch):
        if git(repo, "cat-file", "-e", f"{inst.base_commit}:{rel}", check=False).returncode == 0:
            git(repo, "checkout", "-q", inst.base_commit, "--", rel)
        else:
            (repo / rel).unlink(missing_ok=True)


def build_test_command(inst: SweInstance, python: str) -> list[str]:
    cmd = list(inst.test_cmd or DEFAULT_TEST_CMD)
    if cmd and cmd[0] in ("python", "python3"):
        cmd[0] = python
    return cmd + inst.directives


def grade_local(inst: SweInstance, patch: str, source: str, *, python: str | None = None,
                timeout_s: float | None = None, limits: ResourceLimits | None = None,
                log_dir: Path | None = None, run_empty: bool = False, sandbox: Sandbox | None = None) -> GradeReport:
    """Grade `patch` in a fresh clone (see the module docstring). Never raises for a bad patch, a
    failed clone or a hung test run: those are reports with `error` set. With `sandbox`, the tests
    (code the agent changed) run in it: the clone, the interpreter, no network, nothing else.

    An empty patch is not resolved and runs nothing, as in SWE-bench, unless `run_empty` (used to
    check that a task's tests really fail on its base commit).
    """
    grading()  # a missing extra fails here, before any work
    t0 = time.monotonic()
    if not patch.strip() and not run_empty:
        return GradeReport(instance_id=inst.instance_id, empty_patch=True)
    tmp = Path(tempfile.mkdtemp(prefix="swe-grade-"))
    repo = tmp / "repo"
    steps: list[str] = []
    try:
        try:
            clone_at(source, inst.base_commit, repo)
        except SetupError as e:
            return GradeReport(instance_id=inst.instance_id, error=str(e), duration_s=time.monotonic() - t0)
        patch_file = tmp / "patch.diff"
        patch_file.write_text(patch, encoding="utf-8")
        if patch.strip():
            ok, out = apply_patch(repo, patch_file)
            if not ok:
                log = compose_log([APPLY_PATCH_FAIL, out], None, None, False)
                write_logs(log_dir, patch, log)
                return GradeReport(instance_id=inst.instance_id, error=f"the patch does not apply: {out[-600:]}",
                                   duration_s=time.monotonic() - t0)
            steps += [APPLY_PATCH_PASS, out]
        reset_test_files(repo, inst)
        (tmp / "test.patch").write_text(inst.test_patch, encoding="utf-8")
        res = git(repo, "apply", "-v", str(tmp / "test.patch"), check=False)
        if res.returncode != 0:
            log = compose_log(steps + [RESET_FAILED, res.stderr], None, None, False)
            write_logs(log_dir, patch, log)
            return GradeReport(instance_id=inst.instance_id, applied=True, duration_s=time.monotonic() - t0,
                               error=f"the task's test patch does not apply: {res.stderr.strip()[-400:]}")
        timeout = timeout_s or inst.test_timeout_s or DEFAULT_TIMEOUT_S
        env = minimal_env(tmp / "home", {k: _abs_paths(v, repo) if k == "PYTHONPATH" else v
                                         for k, v in inst.test_env.items()})
        (tmp / "home").mkdir()
        python = python or sys.executable
        wrap = None
        if sandbox is not None:
            shown = [*interpreter_paths(sys.executable), *interpreter_paths(python)]
            env["HOME"] = "/tmp"  # the sandbox's own

            def wrap(argv: list[str]) -> list[str]:
                return sandbox.wrap(argv, repo, read_only=shown, network=False)
        run = run_limited(build_test_command(inst, python), cwd=repo, timeout_s=timeout, env=env,
                          limits=limits or ResourceLimits(memory_mb=4096), wrap=wrap)
        log = compose_log(steps, run.output, run.returncode, run.timed_out)
        log_path = (log_dir or tmp) / "test_output.txt"
        write_logs(log_dir, patch, log)
        if log_dir is None:
            log_path.write_text(log, encoding="utf-8")
        extra = {"error": f"the tests timed out after {timeout:.0f}s"} if run.timed_out else {}
        report = grade_log(inst, log_path, patch, applied=True, timed_out=run.timed_out,
                           duration_s=round(time.monotonic() - t0, 3), **extra)
        if report.error and not run.timed_out:  # say why the tests gave no results
            tail = [ln for ln in run.output.strip().splitlines() if ln.strip()][-1:] or ["no output"]
            report = report.model_copy(update={"error": f"{report.error}: {tail[0][:300]}"})
        if log_dir is not None:
            atomic_write_text(log_dir / "report.json", report.model_dump_json(indent=2))
        return report
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _abs_paths(value: str, root: Path) -> str:
    import os

    return os.pathsep.join(str(root / p) if p and not Path(p).is_absolute() else p for p in value.split(os.pathsep))


# ---------------------------------------------------------------- the benchmark


class SweLocalBenchmark(SplitTasks):
    """SWE tasks graded on this machine (see the module docstring)."""

    max_answer_tokens = 4096

    def __init__(self, instances: Sequence[SweInstance], base_dir: Path | None, sizes: SplitSizes | None = None,
                 name: str = "swe-local", python: str | None = None, test_timeout_s: float | None = None,
                 memory_mb: int = 4096, log_dir: Path | None = None, cache_dir: Path | None = None):
        self.name = name
        self.instances = {i.instance_id: i for i in instances}
        self.base_dir = base_dir
        self.sizes = sizes or SplitSizes()
        self.python, self.test_timeout_s = python, test_timeout_s
        self.limits = ResourceLimits(memory_mb=memory_mb)
        self.log_dir = log_dir
        self.repos = RepoCache(cache_dir)
        self._setup_errors: dict[str, str] = {}
        self.sandbox: Sandbox | None = None
        self.artefacts: Path | None = None

    def isolate(self, sandbox: Sandbox, artefacts: Path) -> None:
        """Tests run in `sandbox`; grading logs go under `artefacts` (`RunsUntrustedCode`)."""
        self.sandbox, self.artefacts = sandbox, artefacts

    @cached_property
    def _by_id(self) -> dict[str, Task]:
        return {i: swe_task(inst) for i, inst in self.instances.items()}

    def preflight(self) -> None:
        """Fail before any rollout when grading cannot work: the `swe` extra, git, patch."""
        grading()
        for tool in ("git", "patch"):
            if shutil.which(tool) is None:
                raise BadInput(f"the {self.name} benchmark needs `{tool}` on PATH")

    def source(self, inst: SweInstance) -> str:
        return self.repos.local(resolve_source(inst, self.base_dir), inst.base_commit)

    def prepare(self, task: Task, ws: Path) -> None:
        """The repository at its base commit, as a fresh one-commit repository. A repository that
        cannot be cloned is remembered and scored as a failure (never raised)."""
        inst = instance_of(task)
        try:
            materialize(inst, self.source(inst), Path(ws))
        except (SetupError, OSError, subprocess.SubprocessError) as e:
            self._setup_errors[str(Path(ws).resolve())] = str(e)

    def grade(self, task: Task, patch: str, log_dir: Path | None = None, run_empty: bool = False) -> GradeReport:
        """Grade a patch for a task (blocking)."""
        inst = instance_of(task)
        try:
            source = self.source(inst)
        except SetupError as e:
            return GradeReport(instance_id=inst.instance_id, error=str(e))
        try:
            return grade_local(inst, patch, source, python=self.python, timeout_s=self.test_timeout_s,
                               limits=self.limits, log_dir=log_dir, run_empty=run_empty, sandbox=self.sandbox)
        except (OSError, subprocess.SubprocessError) as e:  # git or the test command itself failed to run
            return GradeReport(instance_id=inst.instance_id, error=f"grading failed: {_why(e)}")

    async def score(self, task: Task, out: RolloutOutput, ws: Path) -> Score:
        err = self._setup_errors.pop(str(Path(ws).resolve()), None)
        if err:
            return Score(hard=0, soft=0, feedback=f"setup failed, nothing was graded: {err}")
        patch, where = await asyncio.to_thread(rollout_patch, out, Path(ws))
        logs = self.log_dir or (self.artefacts / "swe-logs" if self.artefacts else Path(ws).parent / "swe-logs")
        log_dir = logs / safe_name(task.id) / Path(ws).name
        report = await asyncio.to_thread(self.grade, task, patch, log_dir)
        s = report.score
        return s.model_copy(update={"feedback": f"{s.feedback} (patch from {where})"}) if patch else s


def default_tasks_file() -> Path:
    if not SHIPPED_TASKS.is_file():
        raise BadInput(f"the shipped swe-local tasks are missing ({SHIPPED_TASKS}): pass tasks=PATH "
                       "(a .jsonl of SWE-bench rows) or make some with `skillopt benchmarks make-swe`")
    return SHIPPED_TASKS


@benchmark("swe-local", description="SWE-style bug fixes graded by hidden tests run locally (no Docker)")
def _swe_local(sizes: SplitSizes, tasks: str | None = None, instance_ids: list[str] | str | None = None,
               python: str | None = None, test_timeout_s: float | None = None, memory_mb: int = 4096,
               log_dir: str | None = None) -> SweLocalBenchmark:
    path = Path(tasks) if tasks else default_tasks_file()
    instances = load_instances(path)
    if instance_ids:
        wanted = [s.strip() for s in instance_ids.split(",")] if isinstance(instance_ids, str) else list(instance_ids)
        unknown = sorted(set(wanted) - {i.instance_id for i in instances})
        if unknown:
            raise BadInput(f"{path} has no instance {', '.join(unknown)}")
        instances = [i for i in instances if i.instance_id in set(wanted)]
    bench = SweLocalBenchmark(instances, path.parent, sizes, python=python, test_timeout_s=test_timeout_s,
                              memory_mb=memory_mb, log_dir=Path(log_dir) if log_dir else None)
    bench.preflight()
    return bench
