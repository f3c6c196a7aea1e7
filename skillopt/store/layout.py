"""Where things live under a runs folder: the one module (with `RunStore`, which uses it) that
spells a path under `runs/` or `runs/<run_id>/`. Everything else asks it, or `RunStore`.

    runs/skillopt.db                      the SQLite index across runs (`index_path`)
    runs/<run_id>/cache/responses.jsonl   the run's model response cache
    runs/<run_id>/work/lane-<pid>-<n>/    the workspace lanes rollouts run in
    runs/<run_id>/grading/                grading logs of benchmarks that run untrusted code
    runs/<run_id>/tokens/                 token capture: span streams and per-instance datasets

The run record's own files (config.yaml, rollouts.jsonl, skills/, steps/, ...) are `RunStore`'s.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

INDEX_NAME = "skillopt.db"  # the runs folder's SQLite index (and its -wal, -shm, -journal files)
CONFIG_FILE = "config.yaml"  # a folder holding one is a run
ROLLOUTS_FILE = "rollouts.jsonl"


def index_path(runs_dir: Path) -> Path:
    """The runs folder's SQLite index."""
    return Path(runs_dir) / INDEX_NAME


def rollout_files(runs_dir: Path) -> Iterator[tuple[str, Path]]:
    """(run id, its rollouts.jsonl) of every run under `runs_dir` that has rollouts, by run id."""
    for path in sorted(Path(runs_dir).glob(f"*/{ROLLOUTS_FILE}")):
        yield path.parent.name, path


@dataclass(frozen=True)
class RunPaths:
    """The folders of one run, by name (`RunStore.paths`, or `RunPaths.of` before the run exists)."""

    root: Path

    @classmethod
    def of(cls, runs_dir: Path, run_id: str) -> RunPaths:
        return cls((Path(runs_dir) / run_id).resolve())  # agents run in other folders: absolute paths

    @property
    def config(self) -> Path:
        return self.root / CONFIG_FILE

    @property
    def rollouts(self) -> Path:
        return self.root / ROLLOUTS_FILE

    @property
    def tasks(self) -> Path:
        """The prompts of the tasks the run uses (`RunStore.task_prompts`)."""
        return self.root / "tasks.json"

    @property
    def responses(self) -> Path:
        """The model response cache (`models.cache.ResponseCache`)."""
        return self.root / "cache" / "responses.jsonl"

    @property
    def work(self) -> Path:
        """The workspace lanes (`engine.executor.LocalExecutor`)."""
        return self.root / "work"

    @property
    def grading(self) -> Path:
        """Grading logs (`benchmarks.base.RunsUntrustedCode.isolate`)."""
        return self.root / "grading"

    @property
    def tokens(self) -> Path:
        """Token capture (`traces.tokens.TokenCapture`) and its datasets."""
        return self.root / "tokens"
