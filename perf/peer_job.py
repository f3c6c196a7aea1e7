"""What the peer runners (perf/gepa_runner.py, perf/dspy_runner.py) share: the job perf/quality.py
writes, the user message our chat harness sends for a task, a reply scored the way our runs score it
(an answer by its scorer; code by running its task's checks in the sandbox) and the test split
scored so. Imported inside a peer's own virtualenv, so it needs only skillopt's task types and
scorers (pydantic), not skillopt's environment."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

from skillopt.benchmarks.base import Score, Task
from skillopt.benchmarks.code import CodeBenchmark, extract_code, language_of
from skillopt.benchmarks.qa import score_text
from skillopt.sandbox import make_sandbox

SPLITS = ("train", "val", "test")


def read_job(path: str) -> tuple[dict, dict[str, list[Task]]]:
    """The job and its train / val / test tasks."""
    job = json.loads(Path(path).read_text())
    return job, {split: [Task.model_validate(t) for t in job[split]] for split in SPLITS}


def user_message(t: Task) -> str:
    """What our chat harness sends as the user message."""
    return t.prompt if not t.context else f"{t.context}\n\n{t.prompt}"


@cache
def _checker() -> CodeBenchmark:
    """Runs a code task's checks as our runs do: in bubblewrap, with the benchmark's default limits."""
    bench = CodeBenchmark("peer", tuple)
    bench.isolate(make_sandbox(True), None)
    return bench


def score_reply(task: Task, text: str) -> Score:
    """A reply to `task` scored as our runs score it: a code task's code (its last block in the
    task's language) by its hidden checks, anything else by the task's answer scorer."""
    if task.kind != "code":
        return score_text(task, text)
    code = extract_code(text, language_of(task))
    if not code.strip():
        return Score(hard=0, soft=0, feedback="no code found")
    return _checker().check(task, code).score


def test_scores(tests: list[Task], answer: Callable[[Task], str], concurrency: int) -> dict[str, float]:
    """Each test task's score (ours, hard), its replies asked at our runs' concurrency (the server's
    slots)."""
    with ThreadPoolExecutor(concurrency) as pool:
        return dict(zip((t.id for t in tests), pool.map(lambda t: score_reply(t, answer(t)).hard, tests)))
