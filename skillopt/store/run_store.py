"""The run directory (DESIGN.md section 7). Every file goes through `io.files` (atomic)."""

from __future__ import annotations

import json
import os
import re
import secrets
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml
from pydantic import BaseModel, TypeAdapter, ValidationError

from skillopt.errors import BadInput
from skillopt.skill import Skill
from skillopt.models.types import CallRecord
from skillopt.io.names import safe_name
from skillopt.io.files import (
    append_jsonl, atomic_write_json, check_writable_folder, release_lock, try_lock, atomic_write_text, count_lines,
    json_line, read_jsonl, read_records, write_new_text,
)
from skillopt.store.layout import CONFIG_FILE, INDEX_NAME, RunPaths
from skillopt.store.migrate import LOCK_FILE, upgrade, write_meta
from skillopt.store.schema import (
    Candidate, ConsolidationMetrics, GateDecision, MetricLine, Reflection, RolloutRecord, RunState, RunSummary,
    SkillVersion, StepBatch, StepMetrics, VersionStatus,
)
from skillopt.io.redact import redact
from skillopt.store.writer import Durability, GroupedWriter, RolloutWrite
from skillopt.traces.events import TraceEvent

if TYPE_CHECKING:
    from skillopt.config import StoredConfig

M = TypeVar("M", bound=BaseModel)
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_METRIC_LINE: TypeAdapter[StepMetrics | ConsolidationMetrics] = TypeAdapter(MetricLine)


def check_run_id(run_id: str) -> str:
    """A run id names one folder directly under the runs folder; else `BadInput`."""
    if not _RUN_ID.fullmatch(run_id or "") or ".." in run_id:
        raise BadInput(f"bad run id {run_id!r}: use letters, digits, '.', '_' and '-' (no '/', no '..'), "
                       "at most 128 characters")
    if run_id.lower().startswith(INDEX_NAME):
        raise BadInput(f"bad run id {run_id!r}: {INDEX_NAME}* names the runs folder's index files; pick another")
    return run_id


def new_run_id(benchmark: str) -> str:
    stem = safe_name(Path(benchmark).stem if benchmark.endswith(".jsonl") else benchmark)
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{stem}-{secrets.token_hex(2)}"


def raw_log_file(trace_file: str) -> str:
    """Where the native log of a rollout lies, beside its normalized trace (both run-relative)."""
    return trace_file.removesuffix(".jsonl") + ".raw.log"


class RunStore:
    """Reads and writes one run directory, in the run schema (`store.schema`). A run written by an
    older release is upgraded on opening (`store.migrate`). Versions are kept in memory and in
    skills/index.jsonl."""

    def __init__(self, root: Path, durability: Durability = "group"):
        self.root = root.resolve()  # agents run in other folders: every path we hand out is absolute
        if self.paths.config.exists():
            upgrade(self.root)
        self._lock = threading.Lock()
        self.writer = GroupedWriter(self.root, self.paths.rollouts, durability)
        self._lock_fd: int | None = None
        self._versions: dict[int, SkillVersion] = {}
        self.unreadable_rollout_lines: list[int] = []  # of rollouts.jsonl, at the last `rollouts()`
        self._load_versions()

    def _load_versions(self) -> None:
        self._versions = {}
        for rec in read_jsonl(self.root / "skills" / "index.jsonl"):
            v = SkillVersion.model_validate(rec)
            self._versions[v.version] = v  # later lines update earlier ones

    @classmethod
    def create(cls, runs_dir: Path, run_id: str, lock: bool = False) -> "RunStore":
        """A new, empty run folder; with `lock`, held by this process (see `lock`)."""
        root = cls.check_new(runs_dir, run_id)
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise BadInput(f"cannot write the runs folder {runs_dir}: {e.strerror or type(e).__name__}: "
                           "pick a writable --runs-dir") from None
        store = cls(root)
        if lock:
            store.lock()
            if any(p.name != LOCK_FILE for p in root.iterdir()):  # another process got there first
                store.unlock()
                raise BadInput(f"run {run_id!r} already exists in {runs_dir}: pick another --run-id or --resume it")
        write_meta(root)
        return store

    @staticmethod
    def check_new(runs_dir: Path, run_id: str) -> Path:
        """The folder a new run `run_id` would have; `BadInput` when the id is bad or taken."""
        root = runs_dir / check_run_id(run_id)
        if root.exists() and (not root.is_dir() or any(p.name != LOCK_FILE for p in root.iterdir())):
            raise BadInput(f"run {run_id!r} already exists in {runs_dir}: pick another --run-id or --resume it")
        check_writable_folder(runs_dir, "runs folder", "--runs-dir")
        return root

    @classmethod
    def open(cls, runs_dir: Path, run_id: str, lock: bool = False) -> "RunStore":
        """An existing run; with `lock`, held by this process before anything is read (see `lock`)."""
        root = runs_dir / check_run_id(run_id)
        if not RunPaths(root).config.exists():
            known = sorted(p.name for p in runs_dir.glob(f"*/{CONFIG_FILE}") for p in [p.parent])
            hint = f" (known: {', '.join(known[-5:])})" if known else ""
            raise BadInput(f"no run {run_id!r} in {runs_dir}{hint}")
        store = cls(root)
        if lock:
            store.lock()
            store._load_versions()  # as the last holder left them
        return store

    # the one-writer lock ------------------------------------------------------------------------
    def lock(self) -> None:
        """Hold the run's exclusive lock (`.lock`, with this process's pid) until `unlock` or exit.

        One process at a time writes a run: a second one gets `BadInput` naming the holder's pid.
        The operating system drops the lock when its process dies, even by kill -9.
        """
        if self._lock_fd is not None:
            return
        try:
            fd, holder = try_lock(self.root / LOCK_FILE)
        except OSError as e:
            raise BadInput(f"cannot hold run {self.run_id}: its folder {self.root} is not writable "
                           f"({e.strerror or type(e).__name__}): give skillopt write access to it") from None
        if fd is None:
            raise BadInput(f"run {self.run_id} is in use by process {holder}: wait for it to end (or stop it), "
                           f"then run again") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd
        self._remove_stray_temps()

    def _remove_stray_temps(self) -> None:
        """Temp files of atomic writes a killed process left behind (`.name.XXXX.tmp`): never a record,
        since the rename is what publishes one. Only the lock holder removes them."""
        for p in self.root.rglob(".*.tmp"):
            try:
                p.unlink()
            except OSError:
                pass

    def unlock(self) -> None:
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            release_lock(fd)

    @property
    def run_id(self) -> str:
        return self.root.name

    @property
    def paths(self) -> RunPaths:
        """The run's folders (work lanes, grading logs, token capture, response cache)."""
        return RunPaths(self.root)

    # config ---------------------------------------------------------------------------------
    def write_config(self, config: StoredConfig) -> None:
        atomic_write_text(self.paths.config,
                          yaml.safe_dump(redact(config.layer()), sort_keys=False, allow_unicode=True))

    def read_config(self) -> StoredConfig:
        from skillopt.config import StoredConfig  # lazy: config is the floor below, and heavy to import

        path = self.paths.config
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (yaml.YAMLError, UnicodeDecodeError) as e:
            why = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise BadInput(f"{path} is not valid YAML ({why}): was it edited by hand? fix it or start a new "
                           "run") from None
        try:
            if not isinstance(data, dict):
                raise BadInput(f"{path} does not hold a mapping of settings: was it edited by hand?")
            return StoredConfig.model_validate(data)
        except ValidationError as e:
            raise BadInput(f"{path} is not a run configuration skillopt can read ({e.errors()[0]['msg']} at "
                           f"{'.'.join(map(str, e.errors()[0]['loc']))}): was it edited by hand?") from None

    # what each task asked --------------------------------------------------------------------
    PROMPT_CHARS = 4000  # of each task's prompt kept for the report (the record keeps no answers)

    def write_task_prompts(self, prompts: dict[str, str]) -> None:
        """The prompts of the tasks the run uses (id -> prompt, cut), added to what is recorded."""
        known = self.task_prompts()
        cut = {k: v if len(v) <= self.PROMPT_CHARS else v[:self.PROMPT_CHARS] + " [...]" for k, v in prompts.items()}
        if any(known.get(k) != v for k, v in cut.items()):
            atomic_write_json(self.paths.tasks, {**known, **cut})

    def task_prompts(self) -> dict[str, str]:
        """id -> prompt of the tasks the run recorded ({} for runs made before it did, or a damaged file)."""
        try:
            data = json.loads((self.paths.tasks).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    # skill versions --------------------------------------------------------------------------
    def versions(self) -> list[SkillVersion]:
        return [self._versions[k] for k in sorted(self._versions)]

    def version(self, n: int) -> SkillVersion:
        if n not in self._versions:
            raise BadInput(f"run {self.run_id} has no version v{n:03d} (it has v000..v{len(self._versions) - 1:03d})")
        return self._versions[n]

    def skill(self, n: int) -> Skill:
        """Version n: skills/vNNN.md, and a folder skill's supporting files under skills/vNNN.files/."""
        skill = Skill.load(self.root / "skills" / f"v{n:03d}.md")
        folder = self.skill_files_dir(n)
        if folder.is_dir():
            from skillopt.skill import read_files

            skill = skill.model_copy(update={"files": read_files(folder)})
        return skill

    def skill_files_dir(self, n: int) -> Path:
        """Where version n's supporting files are kept (a folder skill; absent for a single file)."""
        return self.root / "skills" / f"v{n:03d}.files"

    def add_version(self, skill: Skill, parent: int | None, origin: str, status: VersionStatus = "candidate",
                    step: int | None = None) -> SkillVersion:
        """Store a skill version; the same content under the same parent reuses its number."""
        with self._lock:
            for v in self._versions.values():
                if v.sha == skill.sha and v.parent == parent:
                    return v
            n = len(self._versions)
            if skill.files and self.skill_files_dir(n).exists():  # left by a write cut short
                import shutil

                shutil.rmtree(self.skill_files_dir(n))
            for rel, text in skill.files.items():  # before the document: a version is whole once its .md is there
                atomic_write_text(self.skill_files_dir(n) / rel, text)
            atomic_write_text(self.root / "skills" / f"v{n:03d}.md", skill.render())
            v = SkillVersion(version=n, parent=parent, sha=skill.sha, origin=origin, status=status, step=step)
            self._versions[n] = v
            append_jsonl(self.root / "skills" / "index.jsonl", v)
            return v

    def update_version(self, n: int, **changes: Any) -> SkillVersion:
        with self._lock:
            v = self._versions[n].model_copy(update=changes)
            self._versions[n] = v
            append_jsonl(self.root / "skills" / "index.jsonl", v)
            return v

    # rollouts and traces -----------------------------------------------------------------------
    def rollouts(self) -> list[RolloutRecord]:
        """Every rollout record; `unreadable_rollout_lines` then holds the lines that were skipped."""
        self.writer.flush()  # read our own writes
        skipped: list[int] = []
        out = list(read_records(self.paths.rollouts, RolloutRecord, skipped))
        self.unreadable_rollout_lines = skipped
        return out

    def rollout_lines(self) -> int:
        """How many records rollouts.jsonl holds (counted, not parsed)."""
        self.writer.flush()
        return count_lines(self.paths.rollouts)

    def rollout_write(self, rec: RolloutRecord, events: list[TraceEvent] | None = None,
                      raw_log: str | None = None) -> RolloutWrite:
        """What saving `rec` writes: its line, and its trace files when `events` are given (the
        record's `trace_file` must then be `trace_path(...)`)."""
        files: tuple[tuple[str, str], ...] = ()
        if events is not None and rec.trace_file:
            files = ((rec.trace_file, "".join(json_line(e) + "\n" for e in events)),)
            if raw_log:
                files += ((raw_log_file(rec.trace_file), raw_log),)
        return RolloutWrite(line=json_line(rec), files=files)  # the writer redacts the texts again

    async def save_rollout(self, rec: RolloutRecord, events: list[TraceEvent] | None = None,
                           raw_log: str | None = None) -> None:
        """Append a rollout (and write its trace) through the grouped writer; returns once written."""
        await self.writer.save_async(self.rollout_write(rec, events, raw_log))

    def append_rollout(self, rec: RolloutRecord) -> None:
        self.writer.save(self.rollout_write(rec)).result()

    def append_rollouts(self, recs: list[RolloutRecord]) -> None:
        """Many records, grouped (one write and one fsync per group of the writer)."""
        for rec in recs:
            self.writer.save(self.rollout_write(rec))
        self.writer.flush()

    @staticmethod
    def trace_path(task_id: str, key: str) -> str:
        return f"traces/{safe_name(task_id)}/{key[:16]}.jsonl"

    def write_trace(self, task_id: str, key: str, events: list[TraceEvent], raw_log: str | None) -> str:
        rel = self.trace_path(task_id, key)
        lines = "".join(json_line(e) + "\n" for e in events)
        atomic_write_text(self.root / rel, lines)
        if raw_log:
            atomic_write_text(self.root / raw_log_file(rel), raw_log)
        return rel

    def read_trace(self, trace_file: str | None) -> list[TraceEvent]:
        """A rollout's normalized trace (its record's `trace_file`); empty when it is not on disk."""
        from skillopt.traces.events import parse_event

        path = self.root / trace_file if trace_file else None
        if path is None or not path.is_file():
            return []
        return [parse_event(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]

    def copy_trace(self, source: RunStore, trace_file: str) -> None:
        """A rollout's trace (and native log) from another run, under the same relative path."""
        for rel in (trace_file, raw_log_file(trace_file)):
            if (source.root / rel).is_file():  # unsynced: the record that points at it is synced
                write_new_text(self.root / rel, (source.root / rel).read_text(encoding="utf-8"))

    # steps, metrics, state, summary -------------------------------------------------------------
    def step_dir(self, step: int) -> Path:
        return self.root / "steps" / f"{step:04d}"

    def write_batch(self, step: int, batch: StepBatch) -> None:
        atomic_write_json(self.step_dir(step) / "batch.json", batch)

    def read_batch(self, step: int) -> StepBatch | None:
        return _read_model(self.step_dir(step) / "batch.json", StepBatch)

    def write_reflections(self, step: int, reflections: list[Reflection]) -> None:
        atomic_write_json(self.step_dir(step) / "reflections.json", [r.model_dump(mode="json") for r in reflections])

    def write_candidates(self, step: int, candidates: list[Candidate]) -> None:
        atomic_write_json(self.step_dir(step) / "candidates.json", [c.model_dump(mode="json") for c in candidates])

    def read_candidates(self, step: int) -> list[Candidate]:
        path = self.step_dir(step) / "candidates.json"
        if not path.exists():
            return []
        return [Candidate.model_validate(c) for c in json.loads(path.read_text(encoding="utf-8"))]

    def candidates(self) -> list[Candidate]:
        """Every candidate of every step, in step order (a file that cannot be read is left out)."""
        out: list[Candidate] = []
        for path in sorted(self.root.glob("steps/*/candidates.json")):
            try:
                out += self.read_candidates(int(path.parent.name))
            except (ValueError, ValidationError):
                continue
        return out

    def write_gate(self, step: int, decision: GateDecision) -> None:
        atomic_write_json(self.step_dir(step) / "gate.json", decision)

    def step_gates(self) -> list[GateDecision]:
        """The last gate decision of each step (steps/*/gate.json), in step order."""
        return [g for p in sorted(self.root.glob("steps/*/gate.json")) if (g := _read_model(p, GateDecision))]

    def write_consolidation(self, epoch: int, decision: GateDecision) -> None:
        atomic_write_json(self.root / "consolidation" / f"epoch-{epoch:03d}.json", decision)

    def consolidations(self) -> dict[int, GateDecision]:
        """The non-inferiority decision of each consolidated epoch (1-based), by epoch."""
        out = {}
        for path in sorted(self.root.glob("consolidation/epoch-*.json")):
            if (g := _read_model(path, GateDecision)) is not None:
                out[int(path.stem.removeprefix("epoch-"))] = g
        return out

    def append_call(self, rec: CallRecord) -> None:
        """One paid (or failed) model call that is not part of a rollout (the optimizer's)."""
        append_jsonl(self.root / "calls.jsonl", rec)

    def calls(self) -> list[CallRecord]:
        return [CallRecord.model_validate(r) for r in read_jsonl(self.root / "calls.jsonl")]

    def append_metric(self, record: StepMetrics | ConsolidationMetrics) -> None:
        append_jsonl(self.root / "metrics.jsonl", record)

    def metrics(self) -> list[StepMetrics | ConsolidationMetrics]:
        out = []
        for line in read_jsonl(self.root / "metrics.jsonl"):
            try:
                out.append(_METRIC_LINE.validate_python(line))
            except ValidationError:
                continue
        return out

    def write_state(self, state: RunState) -> None:
        atomic_write_json(self.root / "state.json", state)

    def read_state(self) -> RunState | None:
        p = self.root / "state.json"
        if not p.exists():
            return None
        try:
            return RunState.model_validate_json(p.read_bytes())
        except ValidationError as e:
            raise BadInput(f"{p} is damaged ({e.errors()[0]['msg']}): it was cut short or edited; restore it "
                           "from a backup, or start a new run") from None

    def write_summary(self, summary: RunSummary) -> None:
        atomic_write_json(self.root / "summary.json", summary)

    def read_summary(self) -> RunSummary | None:
        p = self.root / "summary.json"
        return RunSummary.model_validate_json(p.read_text(encoding="utf-8")) if p.exists() else None

    def write_best_skill(self, skill: Skill) -> None:
        """best_skill.md, and a folder skill's supporting files under best_skill.files/."""
        folder = self.root / "best_skill.files"
        if folder.exists():
            import shutil

            shutil.rmtree(folder)
        for rel, text in skill.files.items():
            atomic_write_text(folder / rel, text)
        atomic_write_text(self.root / "best_skill.md", skill.render())


def _read_model(path: Path, model: type[M]) -> M | None:
    """A JSON file as `model`; None when it is missing or cannot be read as one."""
    if not path.exists():
        return None
    try:
        return model.model_validate_json(path.read_text(encoding="utf-8"))
    except ValidationError:
        return None
