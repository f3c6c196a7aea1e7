"""Training runs on the coding benchmarks through the real CLI.

- swe-local with the real Claude Code binary: the scripted agent loads the skill, and only when the
  skill holds the rule does it write the fix (the task's gold patch, applied with `git apply`); the
  optimizer proposes the rule. The step must be accepted on hidden tests graded locally.
- mbpp on the chat harness: the fake target answers with the reference solution only under the rule.
- swebench with no Docker engine: one line, exit code 2, before any rollout or run folder.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest

import skillopt.benchmarks as bm
from skillopt.benchmarks.code import reference_code
from tests.fakes.agent_scripts import shell_call, use_skill_call
from tests.fakes.server import FakeModelServer, FakeReply, FakeRequest
from tests.helpers import cli_env, run_cli

RULE = "Reproduce the failing check, then fix the code it points at."
TOOLZ = ["toolz-1.2.0-001", "toolz-1.2.0-002", "toolz-1.2.0-004", "toolz-1.2.0-006", "toolz-1.2.0-010"]


def optimizer_reply(req: FakeRequest) -> FakeReply:
    edit = {"op": "add", "anchor": "", "text": RULE, "rationale": "the agent never tried a fix",
            "evidence": re.findall(r"FAILED task (\S+)", req.last_user_text)}
    return FakeReply(text=json.dumps({"analysis": "no fix was attempted", "edits": [edit]}))


def swe_agent(gold: dict[str, str]):
    """Claude Code's model: Skill tool first; with the rule in the loaded skill, apply the fix."""
    def script(req: FakeRequest) -> FakeReply:
        if req.api == "chat":
            return optimizer_reply(req)
        if not req.tools:
            return FakeReply(text="ok")
        results = req.tool_results
        if not results:
            return FakeReply(text="Loading the skill.", tool_calls=[use_skill_call(req, "task-solver")])
        conversation = "\n".join(m.text for m in req.messages)
        if len(results) == 1 and RULE in conversation:
            statement = next(s for s in gold if s in conversation)
            command = f"cat > /tmp/fix-$$.patch <<'EOF'\n{gold[statement]}EOF\ngit apply /tmp/fix-$$.patch && echo applied"
            return FakeReply(text="Fixing.", tool_calls=[shell_call(req, command)])
        return FakeReply(text="Done.")
    return script


@pytest.mark.skipif(shutil.which("git") is None, reason="git is needed to materialize the repositories")
def test_swe_local_step_with_claude_code_fixes_bugs_under_the_learned_skill(tmp_path):
    pytest.importorskip("swebench", reason="the swe extra is not installed")
    pytest.importorskip("claude_agent_sdk", reason="the claude-code extra (bundles Claude Code) is not installed")
    from skillopt.benchmarks.swe_local import SHIPPED_TASKS

    rows = [json.loads(line) for line in SHIPPED_TASKS.read_text().splitlines() if line.strip()]
    gold = {r["problem_statement"]: r["patch"] for r in rows if r["instance_id"] in TOOLZ}
    with FakeModelServer(swe_agent(gold)) as srv:
        args = ["run", "--benchmark", "swe-local", "--harness", "claude-code", "--harness-mode", "cli",
                "--target_model", f"anthropic:fake-agent@{srv.base_url}",
                "--optimizer_model", f"openai-compatible:fake-opt@{srv.openai_url}",
                "--set", f"benchmark_options.instance_ids={','.join(TOOLZ)}",
                "--run-id", "swe", "--epochs", "1", "--train-size", "2", "--val-size", "2", "--test-size", "1",
                "--batch-size", "2", "--concurrency", "2", "--set", "train.consolidate=false",
                "--set", "limits.timeout_s=180",
                "--set", "gate.alpha=0.25"]  # a plumbing test on 2 validation tasks: 2 wins out of 2 accept
        r = run_cli(args, tmp_path, cli_env(tmp_path), timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    run = tmp_path / "runs" / "swe"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 1 and summary["status"] == "finished"
    assert summary["scores"]["seed"]["val"]["hard"] == 0.0 and summary["scores"]["best"]["val"]["hard"] == 1.0
    assert summary["scores"]["best"]["test"]["hard"] == 1.0
    assert json.loads((run / "steps" / "0001" / "gate.json").read_text())["accepted"]
    rollouts = [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines()]
    assert not [x for x in rollouts if x["error"]]
    resolved = [x for x in rollouts if x["hard"] == 1.0]
    assert resolved and all(x["patch"] and ".claude" not in x["patch"] for x in resolved)
    assert all("resolved" in x["feedback"].lower() for x in resolved)
    unresolved = [x for x in rollouts if x["hard"] == 0.0]
    assert unresolved and all(not x["patch"] for x in unresolved)


def chat_code_run(benchmark: str, srv: FakeModelServer, run_id: str, *extra: str) -> list[str]:
    """`skillopt run` of one step on a code benchmark, chat harness, against the scripted server."""
    return ["run", "--benchmark", benchmark, "--harness", "chat",
            "--target_model", f"openai-compatible:fake-target@{srv.openai_url}",
            "--optimizer_model", f"openai-compatible:fake-opt@{srv.openai_url}",
            "--run-id", run_id, "--epochs", "1", "--train-size", "3", "--val-size", "5", "--test-size", "3",
            "--batch-size", "3", "--set", "train.consolidate=false", *extra]


def references_of(benchmark: str) -> dict[str, str]:
    """Each task's prompt and its reference solution (what a scripted target writes when taught)."""
    return {t.prompt: reference_code(t) for t in bm.get_benchmark(benchmark).tasks("all")}


def mbpp_target(references: dict[str, str], fence: str = "python", nothing: str = "def nothing():\n    pass"):
    def script(req: FakeRequest) -> FakeReply:
        if "You improve a skill" in req.last_user_text:
            return optimizer_reply(req)
        if RULE in req.system:
            code = next(ref for prompt, ref in references.items() if prompt in req.last_user_text)
            return FakeReply(text=f"```{fence}\n{code}\n```")
        return FakeReply(text=f"```{fence}\n{nothing}\n```")
    return script


@pytest.mark.parametrize("benchmark, fence, nothing, seed_name", [
    ("mbpp", "python", "def nothing():\n    pass", "python-functions"),
    # bash: each hidden test is a call of the function in the sandbox, its printed output checked
    ("mbpp-bash", "bash", "nothing() { :; }", "bash-functions"),
])
def test_mbpp_step_on_the_chat_harness(benchmark, fence, nothing, seed_name, tmp_path):
    references = references_of(benchmark)
    with FakeModelServer(mbpp_target(references, fence, nothing)) as srv:
        args = chat_code_run(benchmark, srv, "mbpp")
        r = run_cli(args, tmp_path, cli_env(tmp_path), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads((tmp_path / "runs" / "mbpp" / "summary.json").read_text())
    assert summary["steps"] == 1
    # the benchmark's own seed: code in a fenced block (the generic seed asked for an `Answer:` line)
    seed = (tmp_path / "runs" / "mbpp" / "skills" / "v000.md").read_text()
    assert f"name: {seed_name}" in seed and "Answer:" not in seed
    assert summary["scores"]["seed"]["val"]["hard"] == 0.0 and summary["scores"]["best"]["val"]["hard"] == 1.0
    assert summary["scores"]["best"]["test"]["hard"] == 1.0


def test_mbpp_worked_example_from_a_function_the_teacher_wrote(tmp_path):
    """The teacher (the optimizer model) writes failed train functions too, not only answers: its
    code is run against the task's hidden asserts in a fresh workspace, and the one that passes is the
    worked example; the target, which writes the function only when shown an example, then passes
    val and test."""
    from tests.test_search import useless_reflection

    references = references_of("mbpp")
    taught: list[str] = []

    def script(req: FakeRequest) -> FakeReply:
        user = req.last_user_text
        if "You improve a skill" in user:
            return useless_reflection()
        code = next((ref for prompt, ref in references.items() if prompt in user), None)
        if req.model == "fake-opt" and code:
            taught.append(user)
            return FakeReply(text=f"Write the function the tests call.\n```python\n{code}\n```")
        if "## Worked example" in req.system and code:
            return FakeReply(text=f"```python\n{code}\n```")
        return FakeReply(text="```python\ndef nothing():\n    pass\n```")

    with FakeModelServer(script) as srv:
        args = chat_code_run("mbpp", srv, "taught", "--set", "train.rules_per_step=0")
        r = run_cli(args, tmp_path, cli_env(tmp_path), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert len(taught) == 3  # each failed train task
    run = tmp_path / "runs" / "taught"
    cands = json.loads((run / "steps" / "0001" / "candidates.json").read_text())
    (demo,) = [c for c in cands if c["origin"] == "demonstration"]
    assert "solved by the optimizer model and checked by the scorer" in demo["rationale"]
    assert demo["status"] == "accepted", demo
    summary = json.loads((run / "summary.json").read_text())
    assert summary["scores"]["seed"]["test"]["hard"] == 0.0 and summary["scores"]["best"]["test"]["hard"] == 1.0
    # the default template's working-first wording is for answers: a function has no final answer to
    # work toward, so the teacher is asked the task alone and the example opens with the neutral line
    from skillopt.optimizer.template import NONE, WORKING_FIRST

    assert not any(WORKING_FIRST.show_work in u for u in taught)
    best = (run / "best_skill.md").read_text()
    assert NONE.follow in best and WORKING_FIRST.follow not in best, best


def test_swebench_without_a_docker_engine_is_one_line_before_any_rollout(tmp_path):
    pytest.importorskip("swebench", reason="the swe extra is not installed")
    rows = tmp_path / "verified.jsonl"
    rows.write_text(json.dumps({
        "instance_id": "astropy__astropy-12907", "repo": "astropy/astropy", "base_commit": "d16bfe05",
        "problem_statement": "separability matrix is wrong for nested models", "patch": "", "test_patch": "",
        "FAIL_TO_PASS": "[]", "PASS_TO_PASS": "[]", "version": "4.3"}) + "\n")
    env = cli_env(tmp_path, DOCKER_HOST="unix:///nonexistent/docker.sock")
    r = run_cli(["run", "--benchmark", "swebench", "--set", f"benchmark_options.dataset={rows}",
                 "--harness", "claude-code", "--target_model", "anthropic:claude-haiku-4-5@http://127.0.0.1:9",
                 "--optimizer_model", "openai-compatible:opt@http://127.0.0.1:9/v1"], tmp_path, env)
    assert r.returncode == 2, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "docker" in lines[0].lower() and "Traceback" not in r.stderr
    runs = tmp_path / "runs"
    assert not runs.exists() or not [p for p in runs.iterdir() if p.is_dir()], "a run folder was created"


FILE_RULE = "Write the whole function inside the bash block; the file's name alone defines nothing."


def file_name_target(references: dict[str, str], req: FakeRequest) -> FakeReply:
    """A target that replies with the file's name alone, and writes the function once its skill holds
    FILE_RULE."""
    code = next((ref for prompt, ref in references.items() if prompt in req.last_user_text), None)
    if FILE_RULE in req.system and code:
        return FakeReply(text=f"```bash\n{code}\n```")
    return FakeReply(text="```bash\nsolution.sh\n```")


def test_a_rule_from_the_counted_checks_ends_the_file_name_replies(tmp_path):
    """The seed's target answers every mbpp-bash task with a ```bash block holding only `solution.sh`
    (seen on a quarter of the 1.5B's replies). The optimizer states the rule only when its prompt
    counts the failures as functions that did not exist and the replies as one same text, as
    `facts.check_facts` does; under the rule the target writes the function, and the gate accepts it."""
    from tests.test_search import useless_reflection

    references = references_of("mbpp-bash")
    asked: list[str] = []

    def script(req: FakeRequest) -> FakeReply:
        user = req.last_user_text
        if "You improve a skill" in user:
            return useless_reflection()
        if "You keep the rules of a skill" in user:
            asked.append(user)
            counted = "that did not exist where" in user and "failed replies were this same text" in user
            rule = FILE_RULE if counted else "Check the function before you answer."
            return FakeReply(text=json.dumps({"pattern": "the replies define nothing", "rule": rule}))
        return file_name_target(references, req)

    with FakeModelServer(script) as srv:
        args = chat_code_run("mbpp-bash", srv, "named", "--set", "train.rules_per_step=1",
                             "--set", "train.demonstrations=false")
        r = run_cli(args, tmp_path, cli_env(tmp_path), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert len(asked) == 1 and "3 of 3 failed replies were this same text: '```bash solution.sh ```'" in asked[0]
    # code has no expected answer: the prompt asks what the failed checks share, about writing the code
    assert "the answer the scorer expected" not in asked[0] and "expected answers have in common" not in asked[0]
    assert "what the failed checks have in common" in asked[0] and "a rule about writing the code" in asked[0]
    run = tmp_path / "runs" / "named"
    (rule,) = [c for c in json.loads((run / "steps" / "0001" / "candidates.json").read_text())
               if c["origin"] == "rules"]
    assert rule["status"] == "accepted" and FILE_RULE in rule["edits"][0]["text"], rule
    assert rule["rationale"].startswith("undefined: ")
    summary = json.loads((run / "summary.json").read_text())
    assert summary["scores"]["seed"]["test"]["hard"] == 0.0 and summary["scores"]["best"]["test"]["hard"] == 1.0


def test_a_reflection_is_shown_the_counted_checks_too(tmp_path):
    """The reflection proposer's minibatch of code failures comes with what their checks said,
    counted (`facts.checked_facts`), as the rules proposer's clusters do: the same file-name replies,
    and an optimizer that names them only when the counts are in its prompt; the reflection's edit is
    accepted and test goes 0 -> 1. Without the counts the reflection's edit changes nothing."""
    references = references_of("mbpp-bash")
    asked: list[str] = []

    def script(req: FakeRequest) -> FakeReply:
        user = req.last_user_text
        if "You improve a skill" in user:
            asked.append(user)
            counted = ("a function or command that did not exist in 3 of 3" in user
                       and "3 of 3 failed replies were this same text" in user)
            edit = FILE_RULE if counted else "Check the function before you answer."
            return FakeReply(text=json.dumps({"analysis": "the replies define nothing", "edits": [
                {"op": "add", "anchor": "", "text": edit, "rationale": "counted", "evidence": []}]}))
        return file_name_target(references, req)

    with FakeModelServer(script) as srv:
        args = chat_code_run("mbpp-bash", srv, "reflected", "--set", "train.rules_per_step=0",
                             "--set", "train.demonstrations=false", "--set", "train.max_reflections_per_step=1")
        r = run_cli(args, tmp_path, cli_env(tmp_path), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert len(asked) == 1 and "# What the tests said, counted over the failed attempts" in asked[0]
    assert "'<the function called>: command not found' in 3 of 3" in asked[0]
    run = tmp_path / "runs" / "reflected"
    (cand,) = json.loads((run / "steps" / "0001" / "candidates.json").read_text())
    assert cand["origin"] == "reflection" and cand["status"] == "accepted", cand
    summary = json.loads((run / "summary.json").read_text())
    assert summary["scores"]["seed"]["test"]["hard"] == 0.0 and summary["scores"]["best"]["test"]["hard"] == 1.0
