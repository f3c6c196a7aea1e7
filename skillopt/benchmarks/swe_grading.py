"""What both SWE benchmarks share: the instance row, the task built from it, patches, and grading.

An instance is a SWE-bench row (the Verified shape: `instance_id`, `repo`, `base_commit`,
`problem_statement`, `patch`, `test_patch`, `FAIL_TO_PASS`, `PASS_TO_PASS`, `version`, ...), with
the SWE-bench 5.x fields the Docker path needs (`image`, `eval_script`, `log_parser`, `eval_type`)
and a few optional ones for running locally (`source`, `test_cmd`, `test_env`, `test_directives`,
`test_timeout_s`). Unknown fields are kept.

Grading follows SWE-bench: the patch is applied with the same fallbacks (`APPLY_CMDS`); the test
output is written between SWE-bench's markers and graded by `swebench`'s own log parsers and
report rules (`get_eval_report`): every FAIL_TO_PASS test must pass, every PASS_TO_PASS test must
keep passing; `resolved` is both in full. `swebench` is imported lazily: a missing `swe` extra is
a one-line `MissingExtra`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from skillopt.benchmarks.base import RolloutOutput, Score, Task
from skillopt.errors import BadInput, require
from skillopt.git import diff as workspace_diff

# SWE-bench's log markers (swebench.harness.constants), repeated so building a log needs no import.
APPLY_PATCH_FAIL = ">>>>> Patch Apply Failed"
APPLY_PATCH_PASS = ">>>>> Applied Patch"
RESET_FAILED = ">>>>> Reset Failed"
TESTS_TIMEOUT = ">>>>> Tests Timed Out"
START_TEST_OUTPUT = ">>>>> Start Test Output"
END_TEST_OUTPUT = ">>>>> End Test Output"
TEST_EXIT_CODE = ">>>>> Test Exit Code"
NON_TEST_EXTS = (".json", ".png", "csv", ".txt", ".md", ".jpg", ".jpeg", ".pkl", ".yml", ".yaml", ".toml")
REQUIRED = ("instance_id", "repo", "base_commit", "problem_statement", "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS")


class SweInstance(BaseModel):
    """One SWE-bench row. FAIL_TO_PASS / PASS_TO_PASS may be JSON strings, as on the hub."""

    model_config = ConfigDict(frozen=True, extra="allow")

    instance_id: str
    repo: str
    base_commit: str
    problem_statement: str
    patch: str = ""  # the gold patch
    test_patch: str
    FAIL_TO_PASS: list[str]
    PASS_TO_PASS: list[str]
    version: str = ""
    hints_text: str = ""
    # SWE-bench 5.x, for the Docker path
    image: str | None = None
    eval_script: str | None = None
    log_parser: str = "parse_log_pytest"
    eval_type: str = "pass_and_fail"
    # local runs
    source: str | None = None  # git repository / bundle / URL; default https://github.com/<repo>.git
    test_cmd: list[str] | None = None  # default: python -m pytest -rA
    test_env: dict[str, str] = {}
    test_directives: list[str] | None = None  # default: the test files the test patch touches
    test_timeout_s: float | None = None

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")
    @classmethod
    def _json_list(cls, value: Any) -> Any:
        return json.loads(value) if isinstance(value, str) else value

    @field_validator("test_cmd", mode="before")
    @classmethod
    def _split_cmd(cls, value: Any) -> Any:
        import shlex

        return shlex.split(value) if isinstance(value, str) else value

    def row(self) -> dict[str, Any]:
        """The row as SWE-bench writes it (lists as JSON strings, as `make_test_spec` accepts too)."""
        return self.model_dump(exclude_none=True)

    @property
    def directives(self) -> list[str]:
        """What the test command is given: SWE-bench's rule, the test patch's files (non-test
        extensions dropped), unless the row names them."""
        if self.test_directives is not None:
            return list(self.test_directives)
        return [p for p in patch_files(self.test_patch) if not p.endswith(NON_TEST_EXTS)]


def parse_instance(row: Any, where: str) -> SweInstance:
    """A row as a `SweInstance`; a bad row is one `BadInput` line naming where and what."""
    if not isinstance(row, dict):
        raise BadInput(f"{where}: expected a JSON object, got {type(row).__name__}")
    missing = [k for k in REQUIRED if row.get(k) in (None, "")]
    if missing:
        raise BadInput(f"{where}: missing {', '.join(missing)}: a SWE-bench row needs {', '.join(REQUIRED)}")
    try:
        return SweInstance.model_validate(row)
    except (ValidationError, json.JSONDecodeError) as e:
        first = str(e).splitlines()[:3]
        raise BadInput(f"{where}: not a SWE-bench row ({' '.join(first)})") from None


def load_instances(path: Path) -> list[SweInstance]:
    """Rows from a `.jsonl` or `.json` file; any problem is a `BadInput` naming the file and line."""
    if not path.is_file():
        raise BadInput(f"SWE task file {path} not found")
    from skillopt.io.files import read_user_text

    text = read_user_text(path, "SWE task file")
    if path.suffix == ".json":
        rows = json.loads(text)
        items = [(f"{path}[{i}]", r) for i, r in enumerate(rows if isinstance(rows, list) else [rows])]
    else:
        items = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    items.append((f"{path}:{n}", json.loads(line)))
                except json.JSONDecodeError as e:
                    raise BadInput(f"{path}:{n}: invalid JSON ({e.msg})") from None
    out, seen = [], set()
    for where, row in items:
        inst = parse_instance(row, where)
        if inst.instance_id in seen:
            raise BadInput(f"{where}: duplicate instance_id {inst.instance_id!r}")
        seen.add(inst.instance_id)
        out.append(inst)
    if not out:
        raise BadInput(f"{path} has no SWE rows")
    return out


# ---------------------------------------------------------------- the task the agent sees

SWE_PROMPT = """\
You are working in a checkout of the repository {repo}{version}, in the current folder.

Fix this issue:

{statement}

Edit the repository's source files to fix it. Hidden tests will check the fix; do not change or \
add tests, they are replaced before grading. When you are done, reply with a short summary of \
your change."""


def swe_task(inst: SweInstance, note: str = "") -> Task:
    """The `Task` of an instance: the problem statement is the prompt; everything graded is hidden."""
    version = f" (version {inst.version})" if inst.version else ""
    prompt = SWE_PROMPT.format(repo=inst.repo, version=version, statement=inst.problem_statement.strip())
    if note:
        prompt += "\n\n" + note
    visible = {k: v for k, v in (("repo", inst.repo), ("version", inst.version),
                                 ("license", getattr(inst, "license", None)),
                                 ("package", getattr(inst, "package", None))) if v}
    return Task(id=inst.instance_id, kind="swe", prompt=prompt, metadata=visible,
                hidden={"instance": inst.row()})


def instance_of(task: Task) -> SweInstance:
    return SweInstance.model_validate(task.hidden["instance"])


# ---------------------------------------------------------------- git and patches

_DIFF_HEADER = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.M)
_DIFF_BLOCK = re.compile(r"```(?:diff|patch)[^\n]*\n(.*?)```", re.S)


def patch_files(patch: str) -> list[str]:
    """The paths a git patch touches, in order (renames: both names)."""
    seen: list[str] = []
    for a, b in _DIFF_HEADER.findall(patch or ""):
        for p in (a, b):
            if p not in seen:
                seen.append(p)
    return seen


def rollout_patch(out: RolloutOutput, ws: Path | None) -> tuple[str, str]:
    """The patch to grade and where it came from: the harness's patch, else the workspace's diff,
    else the last ```diff block of the reply."""
    if out.patch is not None and out.patch.strip():
        return out.patch, "the workspace diff"
    # a harness that gave a patch (even empty) already diffed the workspace, in its sandbox: git here
    # would run the agent's repository configuration (filters, fsmonitor) outside it
    diff = workspace_diff(ws) if ws is not None and out.patch is None else None  # skillopt.git.diff
    if diff and diff.strip():
        return diff, "the workspace diff"
    blocks = _DIFF_BLOCK.findall(out.text or "")
    if blocks and blocks[-1].strip():
        body = blocks[-1]
        return body if body.endswith("\n") else body + "\n", "a diff in the reply"
    return "", "nothing"


# ---------------------------------------------------------------- logs and grading


def compose_log(steps: list[str], test_output: str | None, exit_code: int | None, timed_out: bool) -> str:
    """A log in the shape of SWE-bench's eval output: setup lines, the test output between the
    markers, the test command's exit code."""
    lines = list(steps)
    if test_output is not None:
        lines += [START_TEST_OUTPUT, test_output.rstrip("\n"), END_TEST_OUTPUT]
        if timed_out:
            lines.append(TESTS_TIMEOUT)
        elif exit_code is not None:
            lines.append(f"{TEST_EXIT_CODE}: {exit_code}")
    return "\n".join(lines) + "\n"


class GradeReport(BaseModel):
    """The outcome of grading one patch."""

    model_config = ConfigDict(frozen=True)

    instance_id: str
    resolved: bool = False
    applied: bool = False
    empty_patch: bool = False
    timed_out: bool = False
    error: str | None = None  # why there is no test verdict (patch did not apply, clone failed...)
    f2p_passed: list[str] = []
    f2p_failed: list[str] = []
    p2p_passed: list[str] = []
    p2p_failed: list[str] = []
    log_path: str | None = None
    duration_s: float = 0.0

    @property
    def score(self) -> Score:
        if self.resolved:
            return Score(hard=1, soft=1, feedback=(
                f"resolved: all {len(self.f2p_passed)} FAIL_TO_PASS tests pass and "
                f"{len(self.p2p_passed)} PASS_TO_PASS tests still pass"))
        if self.empty_patch:
            return Score(hard=0, soft=0, feedback="no change: the patch is empty (edit the repository's files)")
        if self.error or self.timed_out:
            why = self.error or "the tests timed out"
            return Score(hard=0, soft=0, feedback=f"not resolved: {why}"[:1500])
        f2p = len(self.f2p_passed) / max(1, len(self.f2p_passed) + len(self.f2p_failed))
        p2p = len(self.p2p_passed) / max(1, len(self.p2p_passed) + len(self.p2p_failed))
        parts = [f"not resolved: FAIL_TO_PASS {len(self.f2p_passed)}/{len(self.f2p_passed) + len(self.f2p_failed)} pass"]
        if self.f2p_failed:
            parts.append("still failing: " + ", ".join(self.f2p_failed[:5]))
        parts.append(f"PASS_TO_PASS {len(self.p2p_passed)}/{len(self.p2p_passed) + len(self.p2p_failed)} still pass")
        if self.p2p_failed:
            parts.append("broken by the patch: " + ", ".join(self.p2p_failed[:5]))
        return Score(hard=0, soft=round(f2p * p2p, 4), feedback="; ".join(parts)[:1500])


def grading():
    """swebench's grading module (lazily; a missing extra is one line)."""
    return require("swebench.harness.grading", "grading SWE tasks", "swe")


def grade_log(inst: SweInstance, log_path: Path, patch: str, **extra: Any) -> GradeReport:
    """Grade a test log with swebench's parser (`inst.log_parser`) and report rules."""
    g = grading()
    from swebench.types import TestSpec

    spec = TestSpec(instance_id=inst.instance_id, image=inst.image or "", eval_script_list=[], repo=inst.repo,
                    version=inst.version, FAIL_TO_PASS=list(inst.FAIL_TO_PASS), PASS_TO_PASS=list(inst.PASS_TO_PASS),
                    log_parser=inst.log_parser or "parse_log_pytest", eval_type=inst.eval_type or "pass_and_fail")
    pred = {"instance_id": inst.instance_id, "model_patch": patch, "model_name_or_path": "skillopt"}
    report = g.get_eval_report(spec, pred, str(log_path), include_tests_status=True)[inst.instance_id]
    status = report.get("tests_status") or {}
    f2p, p2p = status.get("FAIL_TO_PASS", {}), status.get("PASS_TO_PASS", {})
    error = extra.pop("error", None)
    if error is None and not report.get("patch_successfully_applied"):
        error = "the test log has no usable test results (tests did not run, timed out, or errored)"
    return GradeReport(instance_id=inst.instance_id, resolved=bool(report.get("resolved")), error=error,
                       f2p_passed=f2p.get("success", []), f2p_failed=f2p.get("failure", []),
                       p2p_passed=p2p.get("success", []), p2p_failed=p2p.get("failure", []),
                       log_path=str(log_path), **extra)


def write_logs(log_dir: Path | None, patch: str, log_text: str, report: GradeReport | None = None,
               **files: str) -> None:
    """Per-rollout files: the patch, the test log, the report, and any extra `name=text`."""
    if log_dir is None:
        return
    from skillopt.io.files import atomic_write_text  # secrets masked, as in every file skillopt writes

    atomic_write_text(log_dir / "patch.diff", patch)
    atomic_write_text(log_dir / "test_output.txt", log_text)
    for name, text in files.items():
        atomic_write_text(log_dir / name, text)
    if report is not None:
        atomic_write_text(log_dir / "report.json", report.model_dump_json(indent=2))
