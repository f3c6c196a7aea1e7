"""swebench (Docker): what it builds (container specs, commands, eval script), grading of recorded logs,
cleanup on every path (with a scripted fake engine), and a real run when a Docker engine is present."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

import skillopt.benchmarks as bm
from skillopt.benchmarks.base import RolloutOutput
from skillopt.benchmarks.swe_grading import SweInstance, grade_log
from skillopt.benchmarks.docker_engine import ContainerLimits, ContainerSpec, Docker, labels
from skillopt.benchmarks.environment import task_container
from skillopt.benchmarks.swe_docker_grading import eval_script, evaluate, grading_spec, image_name
from skillopt.git import APPLY_CMDS
from skillopt.benchmarks.swebench_docker import ENV_NOTE, SWEBenchDocker, load_rows
from skillopt.errors import BadInput
from tests.swe_docker import DATASET, IDS, images, needs_docker, owned_by

pytest.importorskip("swebench", reason="the swe extra (swebench) is not installed: pip install 'skillopt[swe]'")

EVAL_SCRIPT = """#!/bin/bash
set -uxo pipefail
source /opt/miniconda3/bin/activate
conda activate testbed
cd /testbed
git checkout abc123 tests/test_calc.py
git apply -v - <<'EOF_114329324912'
diff --git a/tests/test_calc.py b/tests/test_calc.py
EOF_114329324912
: '>>>>> Start Test Output'
pytest -rA tests/test_calc.py
: '>>>>> End Test Output'
git checkout abc123 tests/test_calc.py
"""
ROW = {
    "instance_id": "calc__calc-42", "repo": "calc/calc", "base_commit": "abc123", "version": "1.0",
    "problem_statement": "add() is wrong for negative numbers", "patch": "diff --git a/calc.py b/calc.py\n",
    "test_patch": "diff --git a/tests/test_calc.py b/tests/test_calc.py\n",
    "FAIL_TO_PASS": json.dumps(["tests/test_calc.py::test_negative"]),
    "PASS_TO_PASS": json.dumps(["tests/test_calc.py::test_positive", "tests/test_calc.py::test_zero"]),
    "eval_script": EVAL_SCRIPT, "log_parser": "parse_log_pytest", "eval_type": "pass_and_fail",
}


def recorded_log(negative: str = "PASSED", positive: str = "PASSED", exit_code: int = 0) -> str:
    """A log as `run_instance` records it: setup, the test output between markers, the exit code."""
    return "\n".join([
        "+ git checkout abc123 tests/test_calc.py", "Updated 0 paths from 1b2c3d4",
        ">>>>> Start Test Output", "+ pytest -rA tests/test_calc.py",
        "============================= test session starts ==============================",
        "collected 3 items", "", "tests/test_calc.py ...                                   [100%]",
        "=========================== short test summary info ============================",
        f"{positive} tests/test_calc.py::test_positive", "PASSED tests/test_calc.py::test_zero",
        f"{negative} tests/test_calc.py::test_negative" + (" - assert -1 == 1" if negative == "FAILED" else ""),
        "============================== 3 passed in 0.02s ===============================",
        ">>>>> End Test Output", f">>>>> Test Exit Code: {exit_code}", ""])


@pytest.fixture
def inst() -> SweInstance:
    return SweInstance.model_validate(ROW)


# ---------------------------------------------------------------- what it builds


def test_image_names_follow_swebench(inst):
    assert image_name(inst) == "swebench/sweb.eval.x86_64.calc_1776_calc-42:latest"
    assert image_name(inst, "myhub") == "myhub/sweb.eval.x86_64.calc_1776_calc-42:latest"
    assert image_name(inst.model_copy(update={"image": "reg/own:1"})) == "reg/own:1"
    from swebench.task.checks import expected_image

    assert image_name(inst) == expected_image(inst.instance_id)


def test_container_specs_carry_the_limits_labels_and_mounts(inst, tmp_path):
    import os

    limits = ContainerLimits(memory="6g", cpus=1.5, pids=512, eval_timeout_s=60)
    kw = grading_spec(inst, limits, "swebench", "run7").create_kwargs()
    assert kw["image"] == "swebench/sweb.eval.x86_64.calc_1776_calc-42:latest"
    assert (kw["mem_limit"], kw["memswap_limit"], kw["nano_cpus"], kw["pids_limit"]) == ("6g", "6g", 1_500_000_000, 512)
    assert kw["labels"]["skillopt.owner"].split(":")[1] == str(os.getpid())
    assert {k: v for k, v in kw["labels"].items() if k != "skillopt.owner"} == {
        "skillopt": "1", "skillopt.instance": "calc__calc-42", "skillopt.purpose": "eval", "skillopt.run": "run7"}
    assert kw["volumes"] is None and kw["working_dir"] == "/testbed" and kw["detach"] is True and kw["init"]
    assert kw["command"] == "sleep 960" and kw["name"].startswith("skillopt-eval-calc__calc-42-")  # tests + 900 s
    work = ContainerSpec("img", "n", labels("work", "i"), limits, mounts={str(tmp_path): "/testbed"},
                         read_only={"/opt/tools": "/skillopt/tools/0"}, network="host").create_kwargs()
    assert work["volumes"] == {str(tmp_path): {"bind": "/testbed", "mode": "rw"},
                               "/opt/tools": {"bind": "/skillopt/tools/0", "mode": "ro"}}
    assert work["network_mode"] == "host"


def test_patch_commands_are_swebench_fallbacks():
    from swebench.harness.run_evaluation import GIT_APPLY_CMDS

    assert [" ".join(c) for c in APPLY_CMDS] == list(GIT_APPLY_CMDS)


def test_eval_script_is_the_rows_own_with_the_exit_code_recorded(inst):
    script = eval_script(inst)
    assert script.startswith("#!/bin/bash\nset -uxo pipefail\n")
    assert "pytest -rA tests/test_calc.py" in script
    assert "SWEBENCH_TEST_EXIT_CODE=$?" in script and ">>>>> Test Exit Code" in script


def test_grading_of_recorded_logs(inst, tmp_path):
    log = tmp_path / "test_output.txt"
    log.write_text(recorded_log())
    ok = grade_log(inst, log, "p")
    assert ok.resolved and ok.score.hard == 1 and ok.f2p_passed == ["tests/test_calc.py::test_negative"]
    log.write_text(recorded_log(negative="FAILED", exit_code=1))
    still = grade_log(inst, log, "p")
    assert not still.resolved and still.f2p_failed and still.score.soft == 0
    log.write_text(recorded_log(positive="FAILED", exit_code=1))
    broke = grade_log(inst, log, "p")
    assert not broke.resolved and broke.p2p_failed == ["tests/test_calc.py::test_positive"]
    assert "broken by the patch: tests/test_calc.py::test_positive" in broke.score.feedback
    log.write_text(recorded_log() + ">>>>> Tests Timed Out\n")
    assert not grade_log(inst, log, "p").resolved
    log.write_text(recorded_log(exit_code=2))  # all PASSED but the command failed: not trusted
    assert not grade_log(inst, log, "p").resolved


def test_rows_need_the_swebench_5_fields(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({k: v for k, v in ROW.items() if k != "eval_script"}) + "\n")
    with pytest.raises(BadInput, match="no eval_script: the Docker path needs SWE-bench 5.x rows"):
        load_rows(str(path))
    path.write_text(json.dumps(ROW) + "\n")
    assert [r.instance_id for r in load_rows(str(path))] == ["calc__calc-42"]
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([ROW]), tmp_path / "rows.parquet")
    assert load_rows(str(tmp_path / "rows.parquet"))[0].FAIL_TO_PASS == ["tests/test_calc.py::test_negative"]


# ---------------------------------------------------------------- a scripted engine


@dataclass
class FakeContainer:
    id: str
    name: str
    kwargs: dict
    engine: FakeEngine
    started: bool = False
    files: dict[str, bytes] = field(default_factory=dict)

    def start(self):
        self.started = True

    def exec_run(self, argv, workdir=None, user=None):
        cmd = argv[-1]
        self.engine.commands.append(cmd)
        code, out = self.engine.script(cmd, self)
        return SimpleNamespace(exit_code=code, output=out.encode())

    def put_archive(self, path, data):
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for m in tar.getmembers():
                self.files[f"{path.rstrip('/')}/{m.name}"] = tar.extractfile(m).read()
        return True

    def get_archive(self, path):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name, text in {"testbed/calc.py": b"def add(a, b):\n    return a - b\n",
                               "testbed/tests/test_calc.py": b"def test_positive():\n    pass\n"}.items():
                info = tarfile.TarInfo(name)
                info.size = len(text)
                tar.addfile(info, io.BytesIO(text))
        return iter([buf.getvalue()]), {}

    def remove(self, force=False):
        self.engine.removed.append(self.id)
        self.engine.containers.pop(self.id, None)


class FakeEngine:
    """The docker SDK surface we use; `script(cmd, container)` answers each exec."""

    def __init__(self, script, pull_fails: bool = False):
        self.script = script
        self.pull_fails = pull_fails
        self.containers: dict[str, FakeContainer] = {}
        self.removed: list[str] = []
        self.commands: list[str] = []
        self.images = SimpleNamespace(get=self._get, pull=self._pull)
        self.containers_api = SimpleNamespace(create=self._create)

    def _get(self, image):
        raise LookupError(image)

    def _pull(self, image):
        if self.pull_fails:
            raise RuntimeError(f"pull access denied for {image}")

    def _create(self, **kw):
        c = FakeContainer(id=f"c{len(self.containers) + len(self.removed)}", name=kw["name"], kwargs=kw, engine=self)
        self.containers[c.id] = c
        return c

    @property
    def client(self):
        return SimpleNamespace(images=self.images, containers=self.containers_api)


def script_for(log: str, apply_ok: bool = True, boom: bool = False):
    def answer(cmd: str, container) -> tuple[int, str]:
        if boom and cmd.startswith("/bin/bash /eval.sh"):
            raise ConnectionError("engine went away")
        if cmd.startswith("git apply --verbose /tmp/patch.diff"):
            return (0, "Applied patch calc.py cleanly.") if apply_ok else (1, "error: patch failed")
        if cmd.startswith(("git apply", "patch ")):
            return 1, "error: patch failed"
        if cmd.startswith("/bin/bash /eval.sh"):
            return 0, log
        return 0, ""
    return answer


def test_evaluate_resolves_and_removes_its_container(inst, tmp_path):
    engine = FakeEngine(script_for(recorded_log()))
    report = evaluate(Docker(engine.client), inst, "diff --git a/calc.py b/calc.py\n", ContainerLimits(),
                      log_dir=tmp_path)
    assert report.resolved and report.applied
    assert engine.containers == {} and len(engine.removed) == 1
    assert (tmp_path / "patch.diff").is_file() and (tmp_path / "eval.sh").read_text().startswith("#!/bin/bash")
    assert json.loads((tmp_path / "report.json").read_text())["resolved"] is True
    assert "timeout" in engine.commands[-1] or engine.commands[-1] == "/bin/bash /eval.sh"


@pytest.mark.parametrize("case", ["apply fails", "engine error", "pull fails", "timeout"])
def test_evaluate_failures_are_scored_and_never_leave_a_container(inst, case):
    log = recorded_log()
    engine = FakeEngine(script_for(log, apply_ok=case != "apply fails", boom=case == "engine error"),
                        pull_fails=case == "pull fails")
    if case == "timeout":
        engine.script = lambda cmd, c: (137, "killed") if "eval.sh" in cmd else script_for(log)(cmd, c)
    report = evaluate(Docker(engine.client), inst, "diff --git a/calc.py b/calc.py\n", ContainerLimits())
    assert not report.resolved and report.score.hard == 0
    assert engine.containers == {}
    expected = {"apply fails": "does not apply", "engine error": "engine went away",
                "pull fails": "cannot be pulled", "timeout": "timed out"}[case]
    assert expected in report.score.feedback


def test_empty_patch_runs_nothing(inst):
    engine = FakeEngine(script_for(recorded_log()))
    report = evaluate(Docker(engine.client), inst, "", ContainerLimits())
    assert report.empty_patch and not report.resolved and engine.commands == []


async def test_agent_on_the_host_copies_testbed_runs_a_work_container_and_cleans_up(inst, tmp_path):
    engine = FakeEngine(script_for(recorded_log()))
    bench = SWEBenchDocker(lambda: [inst], docker=Docker(engine.client), agent_in_container=False)
    task = bench.tasks("all")[0]
    assert ENV_NOTE in task.prompt and inst.patch not in task.prompt
    ws = tmp_path / "ws"
    ws.mkdir()
    bench.prepare(task, ws)
    assert (ws / "calc.py").read_text().startswith("def add") and (ws / "tests" / "test_calc.py").is_file()
    env = (ws / ".skillopt" / "env").read_text()
    work = [c for c in engine.containers.values() if c.kwargs["labels"]["skillopt.purpose"] == "work"]
    assert len(work) == 1 and work[0].started and f"docker exec -w /testbed {work[0].name}" in env
    assert work[0].kwargs["volumes"] == {str(ws.resolve()): {"bind": "/testbed", "mode": "rw"}}
    score = await bench.score(task, RolloutOutput(text="fixed", patch="diff --git a/calc.py b/calc.py\n"), ws)
    assert score.hard == 1, score.feedback
    assert engine.containers == {}  # the copy, work and eval containers are all gone
    assert list((tmp_path / "swe-logs" / inst.instance_id).rglob("report.json"))


async def test_agent_in_the_container_gets_a_container_spec_and_its_patch_is_graded(inst, tmp_path):
    engine = FakeEngine(script_for(recorded_log()))
    bench = SWEBenchDocker(lambda: [inst], docker=Docker(engine.client), prefix="local",
                           limits=ContainerLimits(memory="3g", cpus=1.0, pids=256))
    task = bench.tasks("all")[0]
    assert ENV_NOTE not in task.prompt
    ws = tmp_path / "runs" / "r1" / "work" / "lane-1-0"
    ws.mkdir(parents=True)
    bench.bind_run("r1")  # what the run does before its rollouts (engine.setup.isolation)
    bench.prepare(task, ws)
    spec = task_container(ws)
    assert spec is not None and engine.containers == {}  # the harness starts it, not the benchmark
    assert (spec.image, spec.workdir, spec.memory, spec.cpus, spec.pids, spec.network, spec.run) == (
        "local/sweb.eval.x86_64.calc_1776_calc-42:latest", "/testbed", "3g", 1.0, 256, "host", "r1")
    assert not (ws / "calc.py").exists()  # the repository stays in the container
    score = await bench.score(task, RolloutOutput(text="fixed", patch="diff --git a/calc.py b/calc.py\n"), ws)
    assert score.hard == 1, score.feedback
    assert engine.containers == {} and len(engine.removed) == 1  # the grading container


async def test_an_image_that_cannot_be_pulled_is_a_scored_failure(inst, tmp_path):
    engine = FakeEngine(script_for(recorded_log()), pull_fails=True)
    bench = SWEBenchDocker(lambda: [inst], docker=Docker(engine.client), agent_in_container=False)
    task = bench.tasks("all")[0]
    bench.prepare(task, tmp_path)  # never raises
    score = await bench.score(task, RolloutOutput(text="x", patch="diff"), tmp_path)
    assert score.hard == 0 and "setup failed" in score.feedback and "cannot be pulled" in score.feedback


def test_close_removes_every_container_left(inst, tmp_path):
    engine = FakeEngine(script_for(recorded_log()))
    bench = SWEBenchDocker(lambda: [inst], docker=Docker(engine.client), agent_in_container=False)
    bench.prepare(bench.tasks("all")[0], tmp_path)  # a work container, never scored (a crashed rollout)
    assert engine.containers
    bench.close()
    assert engine.containers == {}


def test_no_docker_engine_fails_in_the_factory_with_one_line(monkeypatch):
    import docker

    def refuse(**kw):
        raise docker.errors.DockerException("Error while fetching server API version: Connection refused")

    monkeypatch.setattr(docker, "from_env", refuse)
    with pytest.raises(BadInput) as e:
        bm.get_benchmark("swebench")
    msg = str(e.value)
    assert "\n" not in msg and "needs a running Docker engine" in msg and "swe-local" in msg


# ---------------------------------------------------------------- a real engine, when there is one


@pytest.mark.slow
@needs_docker
def test_a_real_instance_gold_resolves_empty_does_not_and_the_host_workspace_is_its_testbed(tmp_path):
    """A locally built image (tests.swe_docker); SKILLOPT_SWEBENCH_INSTANCE=<id> checks a hub instance
    instead (that needs the network: the data set and its official image)."""
    import os

    from skillopt.benchmarks.swe_grading import instance_of

    hub = os.environ.get("SKILLOPT_SWEBENCH_INSTANCE")
    if hub:
        bench = bm.get_benchmark("swebench", dataset="verified", instance_ids=hub, agent_in_container=False)
    else:
        images(IDS[:1])
        bench = bm.get_benchmark("swebench", dataset=DATASET, instance_ids=IDS[0], agent_in_container=False)
    bench.preflight()
    task = bench.tasks("all")[0]
    gold = bench.grade(task, instance_of(task).patch, log_dir=tmp_path / "gold")
    assert gold.resolved, gold.score.feedback
    assert not bench.grade(task, "").resolved
    ws = tmp_path / "ws"
    ws.mkdir()
    bench.prepare(task, ws)
    assert (ws / ".git").is_dir() and Path(ws / ".skillopt" / "env").is_file()
    out = subprocess.run([str(ws / ".skillopt" / "env"), "git status --porcelain | wc -l; ls -A"], capture_output=True,
                         text=True, timeout=120).stdout.split()
    assert out[0] == "0" and set(out[1:]) == {p.name for p in ws.iterdir()}  # the container sees the workspace
    bench.release(ws)
    bench.close()
    assert owned_by(os.getpid()) == []
