"""Question-answering benchmarks: the generic JSONL format and the `QABenchmark` behind every QA set.

One JSON object per line (blank lines are skipped):

    {"id": "q1", "question": "...", "answer": "42"}
    {"id": "q2", "question": "...", "choices": ["red", "blue"], "answer": "B"}
    {"id": "q3", "question": "...", "answers": ["Paris", "Paris, France"], "context": "..."}

`answer` (one string) or `answers` (a list of accepted strings) is required. With `choices`, the
answer is a letter (`"B"`) or the text of one choice. The scorer is chosen per task unless the
`scorer` option names one: choices -> `choice` (letter match), every answer a number -> `numeric`,
otherwise `exact` (normalized exact match, soft score = token F1); `f1` is the soft alternative.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from skillopt.benchmarks import scorers
from skillopt.benchmarks.base import RolloutOutput, Score, SplitSizes, SplitTasks, Task
from skillopt.errors import BadInput
from skillopt.io.files import read_user_text

ScorerName = Literal["auto", "choice", "numeric", "exact", "f1"]
SCORERS: tuple[str, ...] = ("auto", "choice", "numeric", "exact", "f1")

# The answer-format line closing every prompt; the scorers read exactly this marker.
ANSWER_FORMAT = {
    "choice": "End your reply with a line 'Answer: <letter>' (one of {letters}).",
    "numeric": "End your reply with a line 'Answer: <number>' (the number only, no units).",
    "exact": "End your reply with a line 'Answer: <short answer>' (a few words at most).",
}
ANSWER_FORMAT["f1"] = ANSWER_FORMAT["exact"]


def auto_scorer(choices: Sequence[str], answers: Sequence[str]) -> str:
    """The scorer a task gets when none is named: letter match, numeric match, or exact match."""
    if choices:
        return "choice"
    if answers and all(scorers.parse_number(a) is not None for a in answers):
        return "numeric"
    return "exact"


def build_prompt(question: str, choices: Sequence[str] = (), context: str | None = None,
                 scorer: str = "exact", preamble: str | None = None) -> str:
    """The text the agent sees: preamble, context, question, lettered choices, answer-format line."""
    parts = [p for p in (preamble, f"Context:\n{context.strip()}" if context else None) if p]
    parts.append(question.strip())
    if choices:
        parts.append("\n".join(f"{scorers.LETTERS[i]}. {c}" for i, c in enumerate(choices)))
    letters = ", ".join(scorers.LETTERS[: len(choices)])
    parts.append(ANSWER_FORMAT[scorer].format(letters=letters))
    return "\n\n".join(parts)


def make_task(id: str, question: str, answers: Sequence[str], choices: Sequence[str] = (),
              context: str | None = None, scorer: str = "auto", preamble: str | None = None,
              metadata: dict[str, Any] | None = None, hidden: dict[str, Any] | None = None) -> Task:
    """A QA `Task` whose prompt holds everything the agent may see and whose answers stay out of it.

    The context goes into the prompt (so every harness shows it) rather than `Task.context`.
    """
    chosen = auto_scorer(choices, answers) if scorer == "auto" else scorer
    return Task(
        id=id, kind="qa", choices=tuple(choices), answers=tuple(answers),
        prompt=build_prompt(question, choices, context, chosen, preamble),
        metadata={**(metadata or {}), "scorer": chosen},
        hidden=hidden or {},
    )


def score_text(task: Task, text: str) -> Score:
    """Score a reply with the task's scorer (`metadata["scorer"]`); never raises for a bad reply."""
    if not text or not text.strip():
        return Score(hard=0, soft=0, feedback=f"empty answer (expected {task.reference})")
    kind = task.metadata.get("scorer") or auto_scorer(task.choices, task.answers)
    if kind == "choice":
        best = max((scorers.choice_match(text, a, task.choices) for a in task.answers), key=lambda s: s.soft)
        return best
    if kind == "numeric":
        return scorers.numeric_match(text, task.answers)
    if kind == "f1":
        return scorers.f1_match(text, task.answers)
    return scorers.exact_match(text, task.answers)


class QABenchmark(SplitTasks):
    """Question answering over a fixed list of tasks, loaded on first use.

    Splits come from `assign_splits` over the task ids. `prepare` writes only `task.md` (the
    prompt). `score` never raises for a bad reply. `max_answer_tokens` and `stop` tell a chat
    harness how long an answer may be.
    """

    max_answer_tokens: int = 512
    stop: tuple[str, ...] = ()

    def __init__(self, name: str, load: Callable[[], Sequence[Task]], sizes: SplitSizes | None = None,
                 description: str = "", max_answer_tokens: int | None = None, scorer_fn: Any = None):
        self.name = name
        self.description = description
        self.sizes = sizes or SplitSizes()
        self._load = load
        self.scorer_fn = scorer_fn  # a custom scorer (plugin, judge): `benchmarks.custom`
        if scorer_fn is not None:
            from skillopt.benchmarks.custom import scorer_version

            self.scorer_version = scorer_version(scorer_fn)
        if max_answer_tokens is not None:
            self.max_answer_tokens = max_answer_tokens

    @cached_property
    def _by_id(self) -> dict[str, Task]:
        return {t.id: t for t in self._load()}

    def task(self, task_id: str) -> Task:
        if task_id not in self._by_id:
            raise BadInput(f"benchmark {self.name!r} has no task {task_id!r}")
        return self._by_id[task_id]

    def prepare(self, task: Task, ws: Path) -> None:
        (Path(ws) / "task.md").write_text(task.prompt + "\n", encoding="utf-8")

    async def score(self, task: Task, out: RolloutOutput, ws: Path) -> Score:
        if self.scorer_fn is not None:
            from skillopt.benchmarks.custom import call_scorer

            return await call_scorer(self.scorer_fn, task, out.text)
        return score_text(task, out.text)

    # UsesModels (benchmarks.custom), when the custom scorer does
    def model_specs(self) -> dict[str, str]:
        from skillopt.benchmarks.custom import UsesModels

        return self.scorer_fn.model_specs() if isinstance(self.scorer_fn, UsesModels) else {}

    def bind_models(self, models: Any) -> None:
        from skillopt.benchmarks.custom import UsesModels

        if isinstance(self.scorer_fn, UsesModels):
            self.scorer_fn.bind_models(models)


# ---------------------------------------------------------------- the JSONL format


def _answers(row: dict, where: str) -> list[str]:
    if "answers" in row:
        raw = row["answers"]
        if not isinstance(raw, list) or not raw:
            raise BadInput(f"{where}: 'answers' must be a non-empty list of strings")
    elif "answer" in row:
        raw = [row["answer"]]
    else:
        raise BadInput(f"{where}: missing 'answer' (or 'answers'): each line needs id, question and answer")
    if not all(isinstance(a, (str, int, float)) and not isinstance(a, bool) and str(a).strip() for a in raw):
        raise BadInput(f"{where}: every answer must be a non-empty string or number, got {raw!r}")
    return [str(a).strip() for a in raw]


def _letter(answer: str, choices: list[str], where: str) -> str:
    """A multiple-choice answer given as a letter or as a choice's text, as a letter."""
    letters = scorers.LETTERS[: len(choices)]
    if answer.upper() in letters and len(answer) == 1:
        return answer.upper()
    if answer in choices:
        return letters[choices.index(answer)]
    raise BadInput(f"{where}: answer {answer!r} is neither a letter {letters[0]}-{letters[-1]} "
                   "nor the text of one of the choices")


def parse_line(row: Any, where: str, scorer: str = "auto") -> Task:
    """One JSONL record as a `Task`; `where` (file:line) prefixes every error."""
    if not isinstance(row, dict):
        raise BadInput(f"{where}: expected a JSON object, got {type(row).__name__}")
    for key in ("id", "question"):
        if key not in row or row[key] is None or str(row[key]).strip() == "":
            raise BadInput(f"{where}: missing {key!r}: each line needs id, question and answer")
    if not isinstance(row["question"], str):
        raise BadInput(f"{where}: 'question' must be a string")
    answers = _answers(row, where)
    choices = row.get("choices") or []
    if not isinstance(choices, list) or not all(isinstance(c, str) for c in choices):
        raise BadInput(f"{where}: 'choices' must be a list of strings")
    if choices and not 2 <= len(choices) <= 26:
        raise BadInput(f"{where}: 'choices' needs 2 to 26 entries, got {len(choices)}")
    if choices:
        answers = [_letter(a, choices, where) for a in answers]
    if scorer == "numeric" and any(scorers.parse_number(a) is None for a in answers):
        raise BadInput(f"{where}: the numeric scorer needs numeric answers, got {answers!r}")
    if scorer == "choice" and not choices:
        raise BadInput(f"{where}: the choice scorer needs 'choices'")
    context = row.get("context")
    if context is not None and not isinstance(context, str):
        raise BadInput(f"{where}: 'context' must be a string")
    meta = row.get("metadata") or {}
    if not isinstance(meta, dict):
        raise BadInput(f"{where}: 'metadata' must be a JSON object")
    return make_task(str(row["id"]).strip(), row["question"], answers, choices, context, scorer, metadata=meta)


def load_jsonl(path: str | Path, scorer: str = "auto") -> list[Task]:
    """Read a QA JSONL file; any problem is a `BadInput` naming the file and line."""
    path = Path(path)
    if scorer not in SCORERS:
        raise BadInput(f"unknown scorer {scorer!r}: choose one of {', '.join(SCORERS)}")
    if not path.is_file():
        raise BadInput(f"benchmark file {path} not found: give the path of a .jsonl file or a benchmark name")
    text = read_user_text(path, "benchmark file")
    if "\x00" in text:
        raise BadInput(f"benchmark file {path} holds binary data (NUL bytes): give a UTF-8 .jsonl file")
    tasks: list[Task] = []
    first_line: dict[str, int] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise BadInput(f"{where}: invalid JSON ({e.msg} at column {e.colno}): fix or remove the line") from None
        task = parse_line(row, where, scorer)
        if task.id in first_line:
            raise BadInput(f"{where}: duplicate id {task.id!r} (first on line {first_line[task.id]}): "
                           "ids must be unique")
        first_line[task.id] = n
        tasks.append(task)
    if not tasks:
        raise BadInput(f"{path} has no tasks: write one JSON object per line")
    return tasks


def jsonl_benchmark(path: str | Path, sizes: SplitSizes | None = None, scorer: str = "auto",
                    max_answer_tokens: int | None = None, **scorer_options: Any) -> QABenchmark:
    """The benchmark of a QA JSONL file, named by its path (so a run record can rebuild it).
    `scorer` is a built-in answer match (auto, choice, numeric, exact, f1), `judge` (with `rubric`,
    `judge_model`, `threshold`) or a registered scorer plugin (`benchmarks.custom`)."""
    custom = None
    if scorer not in SCORERS:
        from skillopt.benchmarks.custom import get_scorer

        custom = get_scorer(scorer, **scorer_options)
    elif scorer_options:
        raise BadInput(f"the {scorer} scorer takes no option {', '.join(map(repr, scorer_options))}")
    tasks = load_jsonl(path, scorer if custom is None else "auto")  # read now: a broken file fails before any rollout
    if max_answer_tokens is None:
        max_answer_tokens = 256 if all(t.metadata["scorer"] == "choice" for t in tasks) else 512
    return QABenchmark(str(path), lambda: tasks, sizes, description=f"QA tasks from {path}",
                       max_answer_tokens=max_answer_tokens, scorer_fn=custom)
