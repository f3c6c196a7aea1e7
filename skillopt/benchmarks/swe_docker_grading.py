"""Grading a patch as SWE-bench's harness does, in a fresh container from the instance's image.

`evaluate` follows `swebench.harness.run_evaluation.run_instance` (5.0.2): copy the patch in, apply
it with the same fallbacks (tree reset between attempts; already applied counts), copy the row's
eval script in (through `make_test_spec`, which records the test command's exit code) and run it
under a timeout. The eval script checks out the test files at the base commit, applies the hidden
test patch, runs the tests between SWE-bench's markers and resets the test files. The log is graded
with swebench's parser (`log_parser`) and report rules (`swe_grading.grade_log`). The container is
removed on every way out. Files per grading: `patch.diff`, `eval.sh`, `test_output.txt`,
`report.json` in `log_dir` (an empty patch runs nothing: `patch.diff` and `report.json`).
"""

from __future__ import annotations

import shlex
import tempfile
import time
from typing import Any
from pathlib import Path

from skillopt.benchmarks.docker_engine import (
    ContainerLimits,
    ContainerSpec,
    Docker,
    SetupError,
    container_name,
    labels,
)
from skillopt.git import Runner, apply_with_fallbacks
from skillopt.benchmarks.swe_grading import (
    APPLY_PATCH_FAIL,
    APPLY_PATCH_PASS,
    TESTS_TIMEOUT,
    GradeReport,
    SweInstance,
    grade_log,
    grading,
    write_logs,
)

PATCH_PATH = "/tmp/patch.diff"


def image_name(inst: SweInstance, prefix: str = "swebench") -> str:
    """The row's image, else the published name SWE-bench derives from the instance id under `prefix`
    (`swebench/sweb.eval.x86_64.<id>:latest`, `__` written `_1776_`)."""
    if inst.image:
        return inst.image
    key = f"sweb.eval.x86_64.{inst.instance_id}:latest".lower()
    return f"{prefix.rstrip('/')}/{key}".replace("__", "_1776_")


def eval_script(inst: SweInstance, prefix: str = "swebench") -> str:
    """The row's eval script as swebench runs it (`make_test_spec`: test exit code recorded)."""
    grading()
    from swebench.harness.utils import make_test_spec

    return make_test_spec({**inst.row(), "image": image_name(inst, prefix)}).eval_script


def _in_container(docker: Docker, container: Any) -> Runner:
    """Runs a command in the grading container's /testbed (for `skillopt.git.apply_with_fallbacks`)."""

    def run(argv: list[str]) -> tuple[int, str]:
        code, out, _ = docker.exec(container, shlex.join(argv), 300)
        return code, out

    return run


def grading_spec(inst: SweInstance, limits: ContainerLimits, prefix: str, run: str | None) -> ContainerSpec:
    wall = ContainerLimits(limits.memory, limits.cpus, limits.pids, limits.eval_timeout_s,
                           wall_s=limits.eval_timeout_s + 900)
    return ContainerSpec(image=image_name(inst, prefix), name=container_name("eval", inst.instance_id),
                         labels=labels("eval", inst.instance_id, run), limits=wall)


def evaluate(docker: Docker, inst: SweInstance, patch: str, limits: ContainerLimits, prefix: str = "swebench",
             log_dir: Path | None = None, run: str | None = None, run_empty: bool = False) -> GradeReport:
    """Evaluate a patch in a fresh container removed on every path. Never raises for the patch, the
    image or the container: those are reports with `error` set. An empty patch is not resolved and
    runs nothing, as in SWE-bench, unless `run_empty` (to check that an instance's tests fail)."""
    t0 = time.monotonic()
    if not patch.strip() and not run_empty:
        report = GradeReport(instance_id=inst.instance_id, empty_patch=True)
        if log_dir is not None:  # nothing runs, but the grading is on record like any other
            log_dir.mkdir(parents=True, exist_ok=True)
            (log_dir / "patch.diff").write_text(patch, encoding="utf-8")
            (log_dir / "report.json").write_text(report.model_dump_json(indent=2), encoding="utf-8")
        return report
    container = None
    steps: list[str] = []
    try:
        script = eval_script(inst, prefix)
        container = docker.create(grading_spec(inst, limits, prefix, run))
        if patch.strip():
            docker.put_text(container, PATCH_PATH, patch)
            applied, out = apply_with_fallbacks(PATCH_PATH, _in_container(docker, container))
            if not applied:
                write_logs(log_dir, patch, "\n".join([APPLY_PATCH_FAIL, out]) + "\n", **{"eval.sh": script})
                return GradeReport(instance_id=inst.instance_id, error=f"the patch does not apply: {out[-600:]}",
                                   duration_s=round(time.monotonic() - t0, 3))
            steps += [APPLY_PATCH_PASS, out]
        docker.put_text(container, "/eval.sh", script)
        code, output, timed_out = docker.exec(container, "/bin/bash /eval.sh", limits.eval_timeout_s)
        log = "\n".join(steps + [output] + ([TESTS_TIMEOUT] if timed_out else [])) + "\n"
        extra = {"error": f"the tests timed out after {limits.eval_timeout_s:.0f}s"} if timed_out else {}
        with tempfile.TemporaryDirectory(prefix="swebench-log-") as tmp:
            log_path = (log_dir or Path(tmp)) / "test_output.txt"
            write_logs(log_dir, patch, log, **{"eval.sh": script})
            if log_dir is None:
                log_path.write_text(log, encoding="utf-8")
            report = grade_log(inst, log_path, patch, applied=bool(patch.strip()), timed_out=timed_out,
                               duration_s=round(time.monotonic() - t0, 3), **extra)
        if log_dir is not None:
            (log_dir / "report.json").write_text(report.model_dump_json(indent=2), encoding="utf-8")
        return report
    except SetupError as e:
        return GradeReport(instance_id=inst.instance_id, error=str(e))
    except Exception as e:  # the engine failed mid-way (connection lost, container killed...)
        return GradeReport(instance_id=inst.instance_id, error=f"docker: {type(e).__name__}: {e}"[:600])
    finally:
        if container is not None:
            docker.remove(container)
