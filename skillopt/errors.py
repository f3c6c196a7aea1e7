"""Exceptions that end work. The CLI turns `BadInput` into one line and exit code 2."""

from __future__ import annotations


class SkilloptError(Exception):
    """Base class for errors skillopt raises on purpose."""


class BadInput(SkilloptError):
    """A user mistake: bad flag, unknown name, malformed file, missing key.

    The message is one line saying what is wrong, where, and what to do.
    """


class MissingExtra(BadInput):
    """An optional dependency is not installed."""

    def __init__(self, what: str, extra: str, module: str | None = None):
        hint = f'pip install "skillopt[{extra}]"'
        super().__init__(f"{what} needs the '{extra}' extra ({module or extra} is not installed): run {hint}")
        self.extra = extra


class ModelCallError(SkilloptError):
    """A model call failed after its last retry.

    `transient`: the failure was of the kind a retry may fix (429, 5xx, timeout, connection, a
    malformed reply) and the retries ran out: an infrastructure error, never a score. Otherwise
    the request itself was refused (for example HTTP 400: a prompt too long), which is an outcome
    of what was asked.
    """

    def __init__(self, message: str, transient: bool = False):
        super().__init__(message)
        self.transient = transient


class BudgetExceeded(SkilloptError):
    """A budget limit was reached; the run stops at the next safe point with state saved."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class RunFailed(SkilloptError):
    """The run cannot produce a result (for example: every rollout errored). Exit code 1."""


class ScorerFailed(RunFailed):
    """A scorer raised (or returned something that is not a score): the run stops at its first such
    call, marked failed; after the scorer is fixed, `run --resume` continues it."""

    PREFIX = "the scorer "

    def __init__(self, scorer: str, task_id: str, error: BaseException):
        why = str(error).splitlines()[0] if str(error) else ""
        super().__init__(f"{self.PREFIX}{scorer} raised {type(error).__name__} on task {task_id!r}"
                         f"{': ' + why[:300] if why else ''}: fix it, then continue with run --resume")


def require(module: str, what: str, extra: str):
    """Import an optional dependency lazily, or raise `MissingExtra` naming the pip install."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingExtra(what, extra, module) from e
