"""What `skillopt harvest` writes: `OUT/tasks.jsonl` (one `HarvestedTask` a line) and
`OUT/harvest.json` (a `HarvestReport`). The `harvest` benchmark reads them back."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

HARVEST_VERSION = 1
CheckKind = Literal["test_command", "file_state", "rubric", "none"]
Confidence = Literal["high", "medium", "low", "none"]
SignalKind = Literal["tool_error", "test_failed", "user_correction", "interrupted", "reverted_edit"]


class StartState(BaseModel):
    """Where the session started: its folder and the git commit there, when it can be recovered."""

    model_config = ConfigDict(frozen=True)

    cwd: str | None = None  # `~` stands for the user's home folder
    commit: str | None = None  # full id, checked to exist in `cwd`'s repository
    how: str = ""  # where the commit came from
    clean: bool | None = None  # no uncommitted changes at the start (when the transcript says)
    recovered: bool = False  # the workspace can be rebuilt from `cwd` at `commit`


class Check(BaseModel):
    """How a harvested task is scored, and how sure that check is.

    - `test_command`: run `command` in the workspace after the agent; exit code 0 passes. Test
      files the session changed are in `test_files` (as its repository holds them now; None: deleted)
      and are put in place before the command runs, as SWE-bench applies its test patch;
    - `file_state`: each of `files` exists and holds its `expect` lines;
    - `rubric`: `skillopt.judge` grades the answer against `rubric` (needs a judge model);
    - `none`: nothing to score; the task is kept for reading.
    """

    model_config = ConfigDict(frozen=True)

    kind: CheckKind = "none"
    command: str | None = None
    test_files: dict[str, str | None] = Field(default_factory=dict)
    files: dict[str, list[str]] = Field(default_factory=dict)
    rubric: str | None = None
    confidence: Confidence = "none"
    why: str = ""  # the evidence behind the confidence


class Signal(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: SignalKind
    detail: str = ""


class SessionRef(BaseModel):
    model_config = ConfigDict(frozen=True)

    harness: Literal["claude-code", "codex"]
    session_id: str
    file: str
    started: str = ""
    agent_version: str = ""


class HarvestedTask(BaseModel):
    """One task mined from one session (its first request)."""

    model_config = ConfigDict(frozen=True)

    version: int = HARVEST_VERSION
    id: str
    request: str  # what the user asked
    follow_ups: list[str] = Field(default_factory=list)  # later user messages that were not corrections
    start: StartState = StartState()
    check: Check = Check()
    scored: bool = False  # has a check that can be scored (and a workspace when the check needs one)
    outcome: Literal["success", "failure", "unknown"] = "unknown"  # how the session itself ended
    signals: list[Signal] = Field(default_factory=list)
    skills_used: list[str] = Field(default_factory=list)
    final_answer: str = ""
    session: SessionRef


class Dropped(BaseModel):
    model_config = ConfigDict(frozen=True)

    file: str
    why: str


class HarvestReport(BaseModel):
    """What was read, kept and dropped, and why (`OUT/harvest.json`)."""

    version: int = HARVEST_VERSION
    harness: Literal["claude-code", "codex"]
    path: str
    dry_run: bool = False
    filters: dict[str, str] = Field(default_factory=dict)
    files_read: int = 0
    kept: int = 0
    scored: int = 0
    unscored: int = 0
    by_check: dict[str, int] = Field(default_factory=dict)
    with_test_run: int = 0  # sessions that ran a test command
    with_test_run_scored: int = 0  # ... of which yielded a scored task
    dropped: list[Dropped] = Field(default_factory=list)
    unscored_why: dict[str, str] = Field(default_factory=dict)  # task id -> why it is not scored
