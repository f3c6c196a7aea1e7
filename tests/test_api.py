"""The Python API against the scripted fake server: a task list and a Python scorer train a skill,
evaluate and compare reuse its rollouts, the run reads back as DataFrames, the model-graded judge is
metered as its own role, and the README's example script runs."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import threading

import pytest

import skillopt
from skillopt.benchmarks.base import Task
from skillopt.errors import BadInput
from tests.fakes.server import FakeModelServer, FakeReply, FakeRequest
from tests.helpers import REPO, cli_env, run_cli, write_jsonl
from tests.test_train_e2e import RULE, Scripted


def code_task_objects(n: int) -> list[Task]:
    return [Task(id=f"item-{i:02d}", prompt=f"What is the secret code of item {i}? End with 'Answer: <code>'.",
                 metadata={"code": f"ZETA-{i}"}) for i in range(n)]


class CodeScorer:
    """An async Python scorer (counts its calls): the code must be the reply's last word."""

    def __init__(self) -> None:
        self.calls = 0
        self.lock = threading.Lock()

    async def __call__(self, task: Task, output: str):
        await asyncio.sleep(0)
        with self.lock:
            self.calls += 1
        expected = task.metadata["code"]
        if output.strip().endswith(expected):
            return True
        return 0.0, f"expected {expected}, got {output.strip().split()[-1] if output.strip() else 'nothing'}"


def test_python_api_trains_with_a_python_scorer_and_task_list(tmp_path):
    scorer = CodeScorer()
    runs = tmp_path / "runs"
    with FakeModelServer(Scripted()) as srv:
        target, opt = f"openai-compatible:fake-target@{srv.openai_url}", f"openai-compatible:fake-opt@{srv.openai_url}"
        run = skillopt.train(tasks=code_task_objects(16), scorer=scorer, benchmark="codes", target_model=target,
                             optimizer_model=opt, runs_dir=runs, env={}, run_id="py", epochs=2, batch_size=4,
                             train_size=4, val_size=8, test_size=4, concurrency=2,
                             set={"models.retry_base_delay_s": 0.01})
        assert isinstance(run, skillopt.TrainResult)
        assert run.status == "finished" and run.run_dir == (runs / "py").resolve()
        assert RULE in run.skill.body and run.notes == ()
        assert run.score("seed", "test").hard == 0.0 and run.score("best", "test").hard == 1.0
        assert scorer.calls >= 16
        # evaluate: the run's settings, its Python benchmark given again; every rollout reused
        ev = skillopt.evaluate(run, tasks=code_task_objects(16), scorer=scorer, split="val", runs_dir=runs, env={})
        assert ev.score.hard == 1.0 and ev.score.n == 8 and ev.cached == 8 and ev.trigger is None  # chat: no trigger
        cmp = skillopt.compare(run.seed_ref, run.best_ref, runs_dir=runs, env={})
    hard = {r.split: r for r in cmp.paired if r.metric == "hard"}
    assert hard["val"].lift.wins == 8 and hard["test"].lift.wins == 4
    # the run as DataFrames
    rollouts = skillopt.rollouts_df(run)
    assert set(rollouts.run_id) == {"py"} and {"output", "feedback", "summary", "skill_used"} <= set(rollouts.columns)
    assert rollouts[rollouts.split == "test"].groupby("version").hard.mean().to_dict() == {0: 0.0, run.summary.versions["best"]: 1.0}
    assert "expected ZETA-" in " ".join(rollouts.feedback)
    decisions = skillopt.decisions_df("py", runs_dir=runs)
    assert {"screened-out", "accepted"} <= set(decisions.status)
    accepted = decisions[decisions.status == "accepted"].iloc[0]
    assert RULE in accepted.edit_texts[0] and accepted.wins == 8 and accepted.p_value is not None
    versions = skillopt.versions_df("py", runs_dir=runs)
    assert versions[versions.best].version.tolist() == [run.summary.versions["best"]]
    assert len(skillopt.steps_df("py", runs_dir=runs)) == 2
    assert "py" in set(skillopt.runs_df(runs).run_id)


def test_python_api_bad_input_is_one_line(tmp_path):
    with pytest.raises(BadInput, match="did you mean epochs"):
        skillopt.train(tasks=code_task_objects(4), scorer=CodeScorer(), epoch=2, runs_dir=tmp_path, env={})
    with pytest.raises(BadInput, match="need a scorer"):
        skillopt.train(tasks=[{"id": "a", "prompt": "no answer here"}], runs_dir=tmp_path, env={},
                       target_model="openai-compatible:x@http://127.0.0.1:9/v1")
    with pytest.raises(BadInput, match="unknown setting gate.alfa .*; did you mean gate.alpha"):
        skillopt.train(tasks=code_task_objects(4), scorer=CodeScorer(), set=["gate.alfa=0.1"], runs_dir=tmp_path, env={})


class Judged:
    """The target answers right only with the rule; the judge (its own model name) grades by the rubric."""

    def __init__(self) -> None:
        self.judge_calls = 0
        self.lock = threading.Lock()

    def __call__(self, req: FakeRequest) -> FakeReply:
        if req.model == "fake-judge":
            with self.lock:
                self.judge_calls += 1
            prompt = req.last_user_text
            assert "# Rubric\nThe reply names the code" in prompt
            answer = prompt.split("# The agent's answer", 1)[1]
            ok = bool(re.search(r"ZETA-\d+", answer))
            return FakeReply(text=json.dumps({"score": 1.0 if ok else 0.0, "passed": ok,
                                              "feedback": "names the code" if ok else "no code named"}),
                             usage=(100, 20))
        return Scripted()(req)


def test_judge_scorer_is_metered_as_its_own_role(tmp_path):
    data = write_jsonl(tmp_path / "codes.jsonl", [{"id": f"item-{i:02d}", "question": f"What is the secret code of item {i}?",
                                                   "answer": f"ZETA-{i}"} for i in range(12)])
    script = Judged()
    with FakeModelServer(script) as srv:
        args = ["run", "--benchmark", str(data), "--target-model", f"openai-compatible:fake-target@{srv.openai_url}",
                "--optimizer-model", f"openai-compatible:fake-opt@{srv.openai_url}", "--run-id", "judged",
                "--epochs", "1", "--batch-size", "4", "--train-size", "4", "--val-size", "4", "--test-size", "4",
                "--set", "benchmark_options.scorer=judge",
                "--set", "benchmark_options.rubric=The reply names the code (ZETA- and a number).",
                "--set", f"benchmark_options.judge_model=openai-compatible:fake-judge@{srv.openai_url}",
                "--set", "models.prices={'openai-compatible:fake-judge': [1.0, 2.0]}"]
        r = run_cli(args, tmp_path, cli_env(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    run = tmp_path / "runs" / "judged"
    summary = json.loads((run / "summary.json").read_text())
    judge = summary["meter"]["roles"]["judge"]
    assert judge["calls"] == script.judge_calls > 0
    assert (judge["input_tokens"], judge["output_tokens"]) == (100 * script.judge_calls, 20 * script.judge_calls)
    assert judge["cost_usd"] == pytest.approx(script.judge_calls * (100 * 1.0 + 20 * 2.0) / 1e6)
    assert summary["meter"]["roles"]["target"]["calls"] > 0 and "optimizer" in summary["meter"]["roles"]
    calls = [json.loads(x) for x in (run / "calls.jsonl").read_text().splitlines()]
    assert sum(c["role"] == "judge" for c in calls) == script.judge_calls
    usage = r.stdout.split("usage by role", 1)[1]
    assert re.search(rf"judge\s+│\s+{script.judge_calls}\s", usage), usage
    rows = [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines()]
    assert {x["feedback"] for x in rows} <= {"names the code", "no code named"}
    # the judge's model and rubric are settings that matter: another rubric reuses no rollout
    assert "rubric" in (run / "config.yaml").read_text()


def test_the_example_script_runs(tmp_path):
    def script(req: FakeRequest) -> FakeReply:
        if "You improve a skill" in req.last_user_text:
            edit = {"op": "add", "anchor": "", "text": "Write the arithmetic out before the answer.",
                    "rationale": "show work", "evidence": []}
            return FakeReply(text=json.dumps({"analysis": "no work shown", "edits": [edit]}))
        return FakeReply(text="I think it is\nAnswer: 7")

    with FakeModelServer(script) as srv:
        env = cli_env(tmp_path)
        r = subprocess.run([sys.executable, str(REPO / "examples" / "train_in_python.py"),
                            "--target-model", f"openai-compatible:t@{srv.openai_url}",
                            "--optimizer-model", f"openai-compatible:o@{srv.openai_url}",
                            "--runs-dir", str(tmp_path / "runs"), "--tasks", "32"],
                           cwd=tmp_path, env={**env, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                           timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert re.search(r"run \S+-apples-\S+: finished", r.stdout), r.stdout
    assert "best - seed on test" in r.stdout and "candidate" in r.stdout
