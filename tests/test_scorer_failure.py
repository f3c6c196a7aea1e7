"""A scorer that raises (a bug, a wrong signature, a result that is not a score) stops the run at its
first call: the run is marked failed with one line naming the scorer and the task (never a traceback,
never `new` or `running` forever), no other rollout starts, and once the scorer is fixed the run
resumes to the end. Python API, fake server."""

from __future__ import annotations

import json

import pytest

import skillopt
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
