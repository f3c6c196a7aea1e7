"""The run directory (DESIGN.md section 7). Every file goes through `store.files` (atomic)."""

from __future__ import annotations

import json
import re
import secrets
import threading
import time
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from skillopt.errors import BadInput
from skillopt.skill import Skill
from skillopt.store.files import (
    append_jsonl, atomic_write_json, atomic_write_text, count_lines, read_jsonl, read_records, write_new_text,
)
from skillopt.store.records import RolloutRecord, RunState, RunSummary, SkillVersion
from skillopt.store.writer import Durability, GroupedWriter, RolloutWrite
from skillopt.traces.events import TraceEvent

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(text: str) -> str:
    return _SAFE.sub("_", text)[:120] or "_"


def new_run_id(benchmark: str) -> str:
    stem = safe_name(Path(benchmark).stem if benchmark.endswith(".jsonl") else benchmark)
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{stem}-{secrets.token_hex(2)}"


def raw_log_file(trace_file: str) -> str:
    """Where the native log of a rollout lies, beside its normalized trace (both run-relative)."""
    return trace_file.removesuffix(".jsonl") + ".raw.log"


class RunStore:
    """Reads and writes one run directory. Versions are kept in memory and in skills/index.jsonl."""

    def __init__(self, root: Path, durability: Durability = "group"):
        self.root = root.resolve()  # agents run in other folders: every path we hand out is absolute
        self._lock = threading.Lock()
        self.writer = GroupedWriter(self.root, self.root / "rollouts.jsonl", durability)
        self._versions: dict[int, SkillVersion] = {}
        for rec in read_jsonl(self.root / "skills" / "index.jsonl"):
            v = SkillVersion.model_validate(rec)
            self._versions[v.version] = v  # later lines update earlier ones

    @classmethod
    def create(cls, runs_dir: Path, run_id: str) -> "RunStore":
        root = runs_dir / run_id
        if root.exists() and any(root.iterdir()):
            raise BadInput(f"run {run_id!r} already exists in {runs_dir}: pick another --run-id or --resume it")
        root.mkdir(parents=True, exist_ok=True)
        return cls(root)

    @classmethod
    def open(cls, runs_dir: Path, run_id: str) -> "RunStore":
        root = runs_dir / run_id
        if not (root / "config.yaml").exists():
            known = sorted(p.name for p in runs_dir.glob("*/config.yaml") for p in [p.parent])
            hint = f" (known: {', '.join(known[-5:])})" if known else ""
            raise BadInput(f"no run {run_id!r} in {runs_dir}{hint}")
        return cls(root)

    @property
    def run_id(self) -> str:
        return self.root.name

    # config ---------------------------------------------------------------------------------
    def write_config(self, data: dict[str, Any]) -> None:
        atomic_write_text(self.root / "config.yaml", yaml.safe_dump(data, sort_keys=False, allow_unicode=True))

    def read_config(self) -> dict[str, Any]:
        return yaml.safe_load((self.root / "config.yaml").read_text(encoding="utf-8")) or {}

    # skill versions --------------------------------------------------------------------------
    def versions(self) -> list[SkillVersion]:
        return [self._versions[k] for k in sorted(self._versions)]

    def version(self, n: int) -> SkillVersion:
        if n not in self._versions:
            raise BadInput(f"run {self.run_id} has no version v{n:03d} (it has v000..v{len(self._versions) - 1:03d})")
        return self._versions[n]

    def skill(self, n: int) -> Skill:
        return Skill.load(self.root / "skills" / f"v{n:03d}.md")

    def add_version(self, skill: Skill, parent: int | None, origin: str, status: str = "candidate",
                    step: int | None = None) -> SkillVersion:
        """Store a skill version; the same content under the same parent reuses its number."""
        with self._lock:
            for v in self._versions.values():
                if v.sha == skill.sha and v.parent == parent:
                    return v
            n = len(self._versions)
            atomic_write_text(self.root / "skills" / f"v{n:03d}.md", skill.render())
            v = SkillVersion(version=n, parent=parent, sha=skill.sha, origin=origin, status=status, step=step)  # type: ignore[arg-type]
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
        self.writer.flush()  # read our own writes
        return list(read_records(self.root / "rollouts.jsonl", RolloutRecord))

    def rollout_lines(self) -> int:
        """How many records rollouts.jsonl holds (counted, not parsed)."""
        self.writer.flush()
        return count_lines(self.root / "rollouts.jsonl")

    def rollout_write(self, rec: RolloutRecord, events: list[TraceEvent] | None = None,
                      raw_log: str | None = None) -> RolloutWrite:
        """What saving `rec` writes: its line, and its trace files when `events` are given (the
        record's `trace_file` must then be `trace_path(...)`)."""
        files: tuple[tuple[str, str], ...] = ()
        if events is not None and rec.trace_file:
            files = ((rec.trace_file, "".join(e.model_dump_json() + "\n" for e in events)),)
            if raw_log:
                files += ((raw_log_file(rec.trace_file), raw_log),)
        return RolloutWrite(line=rec.model_dump_json(), files=files)

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
        lines = "".join(e.model_dump_json() + "\n" for e in events)
        atomic_write_text(self.root / rel, lines)
        if raw_log:
            atomic_write_text(self.root / raw_log_file(rel), raw_log)
        return rel

    def copy_trace(self, source: RunStore, trace_file: str) -> None:
        """A rollout's trace (and native log) from another run, under the same relative path."""
        for rel in (trace_file, raw_log_file(trace_file)):
            if (source.root / rel).is_file():  # unsynced: the record that points at it is synced
                write_new_text(self.root / rel, (source.root / rel).read_text(encoding="utf-8"))

    # steps, metrics, state, summary -------------------------------------------------------------
    def step_dir(self, step: int) -> Path:
        return self.root / "steps" / f"{step:04d}"

    def write_step(self, step: int, name: str, data: BaseModel | dict | list | str) -> None:
        path = self.step_dir(step) / name
        if isinstance(data, str):
            atomic_write_text(path, data)
        elif isinstance(data, list):
            atomic_write_json(path, [d.model_dump(mode="json") if isinstance(d, BaseModel) else d for d in data])
        else:
            atomic_write_json(path, data)

    def read_step(self, step: int, name: str) -> Any:
        path = self.step_dir(step) / name
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None

    def write_json(self, rel: str, data: BaseModel | dict | list) -> None:
        """A JSON file under the run (atomic), e.g. consolidation/epoch-001.json."""
        if isinstance(data, list):
            data = [d.model_dump(mode="json") if isinstance(d, BaseModel) else d for d in data]
        atomic_write_json(self.root / rel, data)

    def read_json(self, rel: str) -> Any:
        path = self.root / rel
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None

    def append_metric(self, record: dict[str, Any]) -> None:
        append_jsonl(self.root / "metrics.jsonl", record)

    def metrics(self) -> list[dict[str, Any]]:
        return list(read_jsonl(self.root / "metrics.jsonl"))

    def write_state(self, state: RunState) -> None:
        atomic_write_json(self.root / "state.json", state)

    def read_state(self) -> RunState | None:
        p = self.root / "state.json"
        return RunState.model_validate_json(p.read_text(encoding="utf-8")) if p.exists() else None

    def write_summary(self, summary: RunSummary) -> None:
        atomic_write_json(self.root / "summary.json", summary)

    def read_summary(self) -> RunSummary | None:
        p = self.root / "summary.json"
        return RunSummary.model_validate_json(p.read_text(encoding="utf-8")) if p.exists() else None

    def write_best_skill(self, skill: Skill) -> None:
        atomic_write_text(self.root / "best_skill.md", skill.render())
