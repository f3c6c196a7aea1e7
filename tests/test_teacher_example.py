"""An agent that never lands a function learns from an example run the teacher wrote.

mini-swe-agent (the real package, text actions, the skill in its instance template) on mbpp, through
the real CLI, against one scripted server. The scripted agent lists the folder until its turns run
out (as the embedded 1.5B did), and writes its function into solution.py, then submits, only when
its skill shows an example run that does so. No
rollout solves a task, so no trajectory can be condensed: the teacher (the optimizer model) writes
the failed train functions, one passes its task's hidden asserts, and it becomes an "## Example run"
in the agent's own action form (origin `teacher-example`), screened, gated, kept.
"""

from __future__ import annotations

import importlib.util
import json
import re

import pytest

import skillopt.benchmarks as bm
from skillopt.benchmarks.code import reference_code
from tests.fakes.server import FakeModelServer, FakeReply, FakeRequest
from tests.helpers import cli_env, run_cli
from tests.test_search import useless_reflection

pytestmark = pytest.mark.skipif(importlib.util.find_spec("minisweagent") is None,
                                reason='pip install "skillopt[mini-swe-agent]"')
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def test_an_example_run_from_the_teachers_function_when_no_rollout_solved(tmp_path):
    bench = bm.get_benchmark("mbpp")
    references = {t.prompt: reference_code(t) for t in bench.tasks("all")}
    taught: list[str] = []
    reflected: list[str] = []

    def own(text: str) -> str | None:
        return next((ref for prompt, ref in references.items() if prompt in text), None)

    def script(req: FakeRequest) -> FakeReply:
        user = req.last_user_text
        if req.model == "fake-opt":
            if (code := own(user)) and "```json" not in user and "JSON" not in user:
                taught.append(user)  # the teacher: a failed train task under the skill
                return FakeReply(text=f"Here is the function.\n```python\n{code}\n```")
            if "what the agent did in\nrollouts that failed" in user:
                reflected.append(user)
            return useless_reflection()
        instance = next(m.text for m in req.messages if m.role == "user")
        done = sum("<returncode>" in m.text for m in req.messages if m.role == "user")
        if "## Example run" in instance and "cat > solution.py <<'EOF'" in instance:
            body = f"cat > solution.py <<'EOF'\n{own(instance)}\nEOF" if done == 0 else SUBMIT
        else:
            body = "ls -la"  # never submits: every seed rollout stops on max_turns, as the 1.5B's did
        return FakeReply(text=f"THOUGHT: next.\n\n```mswea_bash_command\n{body}\n```")

    with FakeModelServer(script) as srv:
        args = ["run", "--benchmark", "mbpp", "--harness", "mini-swe-agent",
                "--target_model", f"openai-compatible:fake-target@{srv.openai_url}",
                "--optimizer_model", f"openai-compatible:fake-opt@{srv.openai_url}",
                "--run-id", "taught", "--epochs", "1", "--train-size", "3", "--val-size", "5", "--test-size", "3",
                "--batch-size", "3", "--concurrency", "2", "--set", "train.consolidate=false",
                "--set", "harness_options.action_format=text", "--set", "harness_options.skill_in_prompt=true",
                "--set", "limits.timeout_s=120", "--set", "limits.max_turns=3"]
        r = run_cli(args, tmp_path, cli_env(tmp_path), timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert len(taught) == 3  # each failed train task, once
    # rollouts that stopped on max_turns are failures the trajectory reflection reads, not noise
    assert reflected and "stopped after 3 model calls" in reflected[0]
    run = tmp_path / "runs" / "taught"
    cands = json.loads((run / "steps" / "0001" / "candidates.json").read_text())
    (example,) = [c for c in cands if c["origin"] == "teacher-example"]
    assert "passed its checks" in example["rationale"] and example["status"] == "accepted", example
    best = (run / "best_skill.md").read_text()
    # the agent's own action form: the file in one fenced command, then its submit command
    assert re.search(r"```mswea_bash_command\ncat > solution.py <<'EOF'\ndef ", best), best
    assert f"```mswea_bash_command\n{SUBMIT}\n```" in best
    summary = json.loads((run / "summary.json").read_text())
    assert summary["scores"]["seed"]["test"]["hard"] == 0.0 and summary["scores"]["best"]["test"]["hard"] == 1.0
