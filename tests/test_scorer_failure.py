"""A scorer that raises (a bug, a wrong signature, a result that is not a score) stops the run at its
first call: the run is marked failed with one line naming the scorer and the task (never a traceback,
never `new` or `running` forever), no other rollout starts, and once the scorer is fixed the run
resumes to the end. Python API, fake server."""

from __future__ import annotations

import json

import pytest

import skillopt
from skillopt.errors import ScorerFailed
from skillopt.skill import Skill
from tests.fakes.server import FakeModelServer, FakeReply

TASKS = [{"id": f"q{i}", "question": f"{i}+1?", "answer": str(i + 1)} for i in range(6)]


def divides_by_zero(task, output):
    return 1 / 0


def one_argument(output):
    return True


def not_a_score(task, output):
    return "yes"


def right(task, output):
    return task.answers[0] in output


@pytest.mark.parametrize("bad, error", [(divides_by_zero, "ZeroDivisionError"), (one_argument, "TypeError"),
                                        (not_a_score, "TypeError")])
def test_a_raising_scorer_fails_the_run_at_its_first_call_and_resumes_once_fixed(tmp_path, bad, error):
    with FakeModelServer(lambda req: FakeReply(text="Answer: 2", usage=(10, 5))) as srv:
        spec = f"openai-compatible:fake@{srv.openai_url}"
        common = dict(tasks=TASKS, target_model=spec, optimizer_model=spec, runs_dir=tmp_path, env={}, epochs=1,
                      batch_size=2, train_size=2, val_size=2, test_size=2, concurrency=2,
                      set=["train.consolidate=false"])
        run = skillopt.train(scorer=bad, run_id="r", **common)
        assert run.status == "failed"
        reason = run.summary.stop_reason
        assert reason.startswith(f"the scorer tests.test_scorer_failure.{bad.__name__} raised {error} on task "), reason
        assert "--resume" in reason and "\n" not in reason
        assert len(srv.calls) <= 2  # the first failed score stops the run: no other rollout starts
        state = json.loads((tmp_path / "r" / "state.json").read_text())
        assert state["status"] == "failed"
        fixed = skillopt.train(scorer=right, resume="r", **common)
    assert fixed.status == "finished", fixed.summary.stop_reason
    assert fixed.summary.scores["seed"]["val"].n == 2


def test_a_retry_after_beyond_the_cap_is_an_infrastructure_error_not_the_agents(tmp_path):
    """A 429 asking for an hour is not waited out 30 s at a time until the rollout's own time limit
    blames the agent: the call gives up at once, the rollout is errored (infra), never a score."""
    throttled = FakeReply(status=429, text="rate limited", headers={"retry-after": "3600"})
    with FakeModelServer(lambda req: throttled) as srv:
        spec = f"openai-compatible:fake@{srv.openai_url}"
        result = skillopt.evaluate(Skill.parse(SKILL), tasks=TASKS, target_model=spec, runs_dir=tmp_path, env={}, split="all",
                                   set=["limits.timeout_s=20", "models.retries=1"])
        # one try per call (no wait, no retry of an hour-long Retry-After); each errored rollout is tried
        # again twice later (train.retry_errored), errored again
        assert len(srv.calls) == 3 * len(TASKS)
    assert (result.score.n, result.score.errors) == (0, len(TASKS))
    records = [json.loads(x) for x in (result.run_dir / "rollouts.jsonl").read_text().splitlines()]
    assert {r["error_kind"] for r in records} == {"infra"}
    assert all("Retry-After" in r["error"] for r in records), records[0]["error"]


SKILL = "---\nname: solver\ndescription: Solve the task.\n---\n# Solver\nThink, then answer.\n"


def test_an_evaluation_whose_scorer_raises_is_marked_failed(tmp_path):
    with FakeModelServer(lambda req: FakeReply(text="Answer: 2", usage=(10, 5))) as srv:
        spec = f"openai-compatible:fake@{srv.openai_url}"
        with pytest.raises(ScorerFailed, match="divides_by_zero raised ZeroDivisionError on task"):
            skillopt.evaluate(Skill.parse(SKILL), tasks=TASKS, scorer=divides_by_zero, target_model=spec,
                              runs_dir=tmp_path, env={}, split="all", set=["run_id=e"])
    state = json.loads((tmp_path / "e" / "state.json").read_text())
    assert state["status"] == "failed" and "ZeroDivisionError" in state["stop_reason"]
