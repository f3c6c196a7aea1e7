"""What the peer runners (perf/gepa_runner.py, perf/dspy_runner.py) share: the job perf/quality.py
writes, the user message our chat harness sends for a task, and the test split scored the way our
runs score it. Imported inside a peer's own virtualenv, so it needs only skillopt's task types and
scorer (pydantic), not skillopt's environment."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from skillopt.benchmarks.base import Task
from skillopt.benchmarks.qa import score_text

SPLITS = ("train", "val", "test")


def read_job(path: str) -> tuple[dict, dict[str, list[Task]]]:
    """The job and its train / val / test tasks."""
    job = json.loads(Path(path).read_text())
    return job, {split: [Task.model_validate(t) for t in job[split]] for split in SPLITS}


def user_message(t: Task) -> str:
    """What our chat harness sends as the user message."""
    return t.prompt if not t.context else f"{t.context}\n\n{t.prompt}"


def test_scores(tests: list[Task], answer: Callable[[Task], str], concurrency: int) -> dict[str, float]:
    """Each test task's score (our scorer, hard), its replies asked at our runs' concurrency (the
    server's slots)."""
    with ThreadPoolExecutor(concurrency) as pool:
        return dict(zip((t.id for t in tests), pool.map(lambda t: score_text(t, answer(t)).hard, tests)))
