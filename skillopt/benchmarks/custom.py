"""Benchmarks and scorers written in Python: a task list and a scoring function, or a scorer plugin.

A scorer is a callable `(task, output) -> result`, sync or async, where `output` is the agent's
final answer text and `result` is one of:

- a `Score` (hard 0/1, soft 0..1, feedback);
- a `(value, feedback)` tuple, or a bare value: a bool, or a number in [0, 1] (the soft score;
  hard is 1 when it is at least 0.5).

Its feedback is what the optimizer reads about a failure: say what was expected. A scorer that
raises is a broken benchmark (the run stops), never a zero score.

Scorers register by name with `@scorer("name")` (built-ins: `auto`, `exact`, `numeric`, `choice`,
`f1`; `judge` is the model-graded one, `skillopt.benchmarks.judge`), or from other packages
through the entry-point group `skillopt.scorers`; a `.jsonl` benchmark picks one with
`--set benchmark_options.scorer=NAME`.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from skillopt.benchmarks.base import RolloutOutput, Score, Split, SplitSizes, Task, assign_splits
from skillopt.errors import BadInput, ScorerFailed

ENTRY_POINT_GROUP = "skillopt.scorers"
ScoreLike = Score | float | int | bool | tuple
ScoreFn = Callable[[Task, str], ScoreLike | Awaitable[ScoreLike]]


@runtime_checkable
class UsesModels(Protocol):
    """A scorer (or benchmark) that calls models, the model-graded judge: before any rollout it
    names the models it needs by role (their keys and prices are checked) and gets the run's
    `Models`, so its calls are metered, budgeted and cached like every other."""

    def model_specs(self) -> dict[str, str]: ...

    def bind_models(self, models: Any) -> None: ...


def to_score(value: Any, where: str = "the scorer") -> Score:
    """A scorer's result as a `Score` (see the module docstring for what it may return)."""
    if isinstance(value, Score):
        return value
    feedback = ""
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], str):
        value, feedback = value
    if isinstance(value, Score):
        return value.model_copy(update={"feedback": feedback or value.feedback})
    if isinstance(value, bool):
        return Score(hard=float(value), soft=float(value), feedback=feedback or ("correct" if value else "wrong"))
    if isinstance(value, (int, float)) and 0 <= value <= 1:
        return Score(hard=float(value >= 0.5), soft=float(value), feedback=feedback)
    raise TypeError(f"{where} returned {value!r}: return a Score, a bool, a number in [0, 1], or (value, feedback)")


async def call_scorer(fn: ScoreFn, task: Task, text: str) -> Score:
    """`fn`'s score of `text`; `ScorerFailed` (naming the scorer and the task) when it raises or
    returns something that is not a score."""
    name = scorer_name(fn)
    try:
        result = fn(task, text)
        if inspect.isawaitable(result):
            result = await result
        return to_score(result, f"the scorer {name}")
    except ScorerFailed:
        raise
    except Exception as e:  # noqa: BLE001 - the user's code: any failure is the scorer's, named
        raise ScorerFailed(name, task.id, e) from e


def scorer_name(fn: Any) -> str:
    """How a message names a scorer: its qualified name (a function), else its class's."""
    for obj in (fn, type(fn)):
        name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
        if isinstance(name, str) and name not in ("function", "partial"):
            module = getattr(obj, "__module__", "") or ""
            return f"{module}.{name}" if module and module not in ("__main__", "builtins") else name
    return repr(fn)[:60]


def scorer_version(fn: Any) -> str:
    """What identifies a scorer's behaviour, for the rollout cache: its own `version` when it has one,
    else a hash of its source code (a changed scorer never reuses rollouts scored by the old one)."""
    own = getattr(fn, "version", None)
    if isinstance(own, str) and own:
        return own
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        source = f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', type(fn).__qualname__)}"
    return hashlib.sha256(source.encode()).hexdigest()[:12]


# ---------------------------------------------------------------- the scorer registry

_SCORERS: dict[str, Callable[..., ScoreFn]] = {}
_plugins_loaded = False


def scorer(name: str):
    """Register a scorer factory under `name`: `factory(**options) -> (task, output) -> result`.
    A plain scoring function works too (it takes no options)."""

    def register(fn):
        _SCORERS[name.lower()] = fn
        return fn

    return register


def _load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    from skillopt.benchmarks.registry import plugin_callables

    for ep, loaded in plugin_callables(ENTRY_POINT_GROUP, "scorer", lambda name: name.lower() in _SCORERS):
        _SCORERS[ep.name.lower()] = loaded


def list_scorers() -> list[str]:
    from skillopt.benchmarks.qa import SCORERS

    _load_plugins()
    return sorted({*SCORERS, "judge", *_SCORERS})


def get_scorer(name: str, **options: Any) -> ScoreFn:
    """The scorer registered as `name` (case-insensitive), made with `options`."""
    key = name.lower()
    if key == "judge":
        from skillopt.benchmarks.judge import JudgeScorer

        return JudgeScorer(**options)
    if key not in _SCORERS:
        _load_plugins()
    if key not in _SCORERS:
        raise BadInput(f"unknown scorer {name!r}: choose one of {', '.join(list_scorers())}")
    made = _SCORERS[key]
    params = [p for p in inspect.signature(made).parameters.values() if p.kind != p.VAR_KEYWORD]
    if len(params) >= 2 and not options:  # a scoring function itself: (task, output)
        return made
    return made(**options)


# ---------------------------------------------------------------- a benchmark from Python objects


def as_task(item: Task | Mapping[str, Any], n: int) -> Task:
    """A task given in Python: a `Task`, or a dict in the JSONL QA format ({"id", "question",
    "answer" | "answers", "choices"?, "context"?}), or {"id", "prompt", ...} (`Task`'s own fields)."""
    if isinstance(item, Task):
        return item
    if not isinstance(item, Mapping):
        raise BadInput(f"task {n}: expected a skillopt Task or a dict, got {type(item).__name__}")
    row = dict(item)
    row.setdefault("id", f"task-{n:04d}")
    if "question" in row:
        from skillopt.benchmarks.qa import parse_line

        return parse_line(row, f"task {n}")
    if "prompt" not in row:
        raise BadInput(f"task {n}: give a 'question' (QA format) or a 'prompt'")
    try:
        return Task.model_validate({**row, "id": str(row["id"])})
    except ValueError as e:
        raise BadInput(f"task {n}: {str(e).splitlines()[0]}") from None


class PythonBenchmark:
    """A benchmark made of tasks given in Python and a scorer (a callable or a registered name).

    With no scorer, QA tasks (they have answers) are scored like a `.jsonl` file's. `prepare`
    writes the prompt to `task.md` and the task's files; `score` calls the scorer on the final
    answer text (for coding tasks, the text is the agent's reply and `out.patch` its diff).
    """

    max_answer_tokens: int = 512
    stop: tuple[str, ...] = ()

    def __init__(self, name: str, tasks: Sequence[Task | Mapping[str, Any]], scorer: ScoreFn | str | None = None,
                 sizes: SplitSizes | None = None, max_answer_tokens: int | None = None):
        self.name = name
        self.sizes = sizes or SplitSizes()
        self._tasks = [as_task(t, i) for i, t in enumerate(tasks)]
        if not self._tasks:
            raise BadInput("no tasks given: pass a non-empty list of tasks")
        ids = [t.id for t in self._tasks]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise BadInput(f"duplicate task id {dup!r}: ids must be unique")
        if isinstance(scorer, str):
            scorer = get_scorer(scorer)
        if scorer is None and not all(t.answers for t in self._tasks):
            raise BadInput("tasks without answers need a scorer: pass scorer=<callable> (or give each an answer)")
        self.scorer = scorer
        self.scorer_version = scorer_version(scorer) if scorer is not None else "qa"
        if max_answer_tokens is not None:
            self.max_answer_tokens = max_answer_tokens

    @cached_property
    def _splits(self) -> dict[str, list[str]]:
        return assign_splits([t.id for t in self._tasks], self.sizes)

    def tasks(self, split: Split = "all") -> list[Task]:
        by_id = {t.id: t for t in self._tasks}
        if split not in self._splits:
            raise BadInput(f"unknown split {split!r}: choose one of {', '.join(self._splits)}")
        return [by_id[i] for i in self._splits[split]]

    def prepare(self, task: Task, ws: Path) -> None:
        (Path(ws) / "task.md").write_text(task.prompt + "\n", encoding="utf-8")
        for rel, content in task.files.items():
            path = Path(ws) / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content, encoding="utf-8")

    async def score(self, task: Task, out: RolloutOutput, ws: Path) -> Score:
        if self.scorer is None:
            from skillopt.benchmarks.qa import score_text

            return score_text(task, out.text)
        return await call_scorer(self.scorer, task, out.text)

    # UsesModels, when the scorer does
    def model_specs(self) -> dict[str, str]:
        return self.scorer.model_specs() if isinstance(self.scorer, UsesModels) else {}

    def bind_models(self, models: Any) -> None:
        if isinstance(self.scorer, UsesModels):
            self.scorer.bind_models(models)
