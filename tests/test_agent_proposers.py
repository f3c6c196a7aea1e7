"""The agent-aware proposers (optimizer/agent.py): what the optimizer is shown for agent
trajectories (failure kinds counted over the batch, the commands with their exit codes, the test
tail, the diff, the stop), and that each candidate is a well-formed edit of the skill, with its
own origin. The optimizer is the scripted fake server; the trajectories are read from
Claude Code / Codex / mini-swe-agent shaped traces by `traces.trajectory`."""

from __future__ import annotations

import json
import re

import pytest

from skillopt.benchmarks.base import Task
from skillopt.edits import apply_edits
from skillopt.models import Meter, Models, ProviderEnv
from skillopt.models.spec import parse_model_spec
from skillopt.optimizer.agent import (
    SHELL_RULE, ProcedureProposer, ShellRuleProposer, TrajectoryDemonstrationProposer, TrajectoryReflectionProposer,
    condense, habits,
)
from skillopt.optimizer.propose import SearchState
from skillopt.optimizer.types import ScoredRollout
from skillopt.skill import Skill
from skillopt.traces.events import MessageEvent
from skillopt.traces.trajectory import python_source, said, trajectory
from tests.fakes.server import FakeModelServer, FakeReply, FakeRequest
from tests.fakes.agent_scripts import shell_call
from tests.helpers import cli_env, run_cli, write_jsonl
from tests.test_harness_mini_swe_agent import bwrap, skill_path
from tests.test_train_e2e import code_tasks
from tests.test_outcome import PATCH, call, claude_trace, codex_trace

SKILL = Skill.parse("---\nname: fixer\ndescription: Fix failing tests in a Python repository.\n---\n"
                    "# Fixer\n\nFind the bug and fix it.\n")


def mini_trace(n: int) -> list:
    """mini-swe-agent shaped: bash only, the skill read first, an edit that fails, no test run."""
    return [MessageEvent(role="user", text=f"fix issue {n}"),
            *call(1, "bash", {"command": "cat .agents/skills/fixer/SKILL.md"}, "name: fixer"),
            *call(2, "bash", {"command": "grep -rn total pkg/"}, "pkg/core.py:3: total = 0"),
            *call(3, "bash", {"command": "sed -i 's/total = 0/total = 1/' pkg/core.pyy"},
                  "[exit code 2]\nsed: can't read pkg/core.pyy", failed=True),
            *call(4, "bash", {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}, "")]


def scored(task_id: str, events: list, hard: float, patch: str | None, error: str | None = None) -> ScoredRollout:
    return ScoredRollout(task_id=task_id, prompt=f"Fix the bug reported in issue {task_id}.", reference="",
                         output="done", hard=hard, soft=hard, feedback="2 tests failed" if hard < 1 else "passed",
                         summary="", trajectory=trajectory(events, error, patch))


def state() -> SearchState:
    rollouts = [scored("t-codex", codex_trace(), 0.0, "", "timed out after 60s"),
                scored("t-mini-1", mini_trace(1), 0.0, ""), scored("t-mini-2", mini_trace(2), 0.0, ""),
                scored("t-claude", claude_trace(), 1.0, PATCH)]
    rollouts[0].error = None  # a time-out is an agent failure, scored 0 (the trace still says it)
    tasks = {r.task_id: Task(id=r.task_id, prompt=r.prompt, kind="swe") for r in rollouts}
    return SearchState(step=1, version=0, skill=SKILL, scored=rollouts, tasks=tasks)


def optimizer(seen: list[FakeRequest]):
    def script(req: FakeRequest) -> FakeReply:
        seen.append(req)
        if "numbered procedure" in req.last_user_text:
            return FakeReply(text=json.dumps({"analysis": "passing runs tested after editing", "steps": [
                "1. Read the failing test first.", "Find the code it exercises with grep.",
                "Make the smallest edit, then check it applied with git diff.",
                "Run the tests with python -m pytest -q before finishing."]}))
        edit = {"op": "add", "anchor": "", "text": "Run `python -m pytest -q` after every edit; "
                "finish only when it exits 0.", "rationale": "tests never run", "evidence": ["t-mini-1"]}
        return FakeReply(text=json.dumps({"analysis": "the agent never ran the tests", "edits": [edit]}))
    return script


def test_trajectories_are_read_from_each_agents_trace():
    t = trajectory(mini_trace(1), None, "")
    assert [(s.index, s.exit, s.edit, s.test) for s in t.steps] == [
        (1, 0, False, False), (2, 0, False, False), (3, 2, True, False), (4, 0, False, False)]
    assert t.failure_kinds == ["tests never run", "edit did not apply"] and t.diff == ""
    assert [s.said for s in t.steps] == ["", "", "sed: can't read pkg/core.pyy", ""]  # why, for a failed one only
    c = trajectory(claude_trace(), None, PATCH)
    assert c.tests_run == 2 and c.test_exit == 0 and c.tested_after_last_edit and c.failure_kinds == []
    assert c.diff == "1 file (+1 -1): pkg/core.py" and c.test_tail == "1 passed in 0.1s"
    assert trajectory([MessageEvent(role="assistant", text="Answer: 4")]) is None  # a chat rollout


def test_a_failed_command_says_why_in_the_lines_that_name_the_error():
    """Python sent to the shell: an exit code of 2 alone does not say so; the shell's two complaints do.
    A traceback's last line, and a failure that names no error (its last line), are what is kept."""
    shell = "[exit code 2]\n/bin/sh: 2: import: not found\n/bin/sh: 5: Syntax error: \"(\" unexpected\n"
    assert said(shell) == '/bin/sh: 2: import: not found | /bin/sh: 5: Syntax error: "(" unexpected'
    traceback = ("Traceback (most recent call last):\n  File \"solution.py\", line 3, in <module>\n"
                 "    print(f(2))\nNameError: name 'f' is not defined\n")
    assert said(traceback) == "NameError: name 'f' is not defined"
    assert said("[exit code 1]\n\nchecking...\n3 != 4\n") == "3 != 4"
    assert said("[exit code 1]\n") == "" and len(said("error " * 100)) == 200
    events = [*call(1, "bash", {"command": "import cmath\ndef angle(z):\n    return cmath.phase(z)"}, shell,
                    failed=True)]
    assert trajectory(events, None, None).steps[0].said.startswith("/bin/sh: 2: import: not found")


async def test_trajectory_reflection_shows_kinds_commands_and_exit_codes():
    seen: list[FakeRequest] = []
    st = state()
    with FakeModelServer(optimizer(seen)) as srv:
        models = Models(env=ProviderEnv(), meter=Meter())
        spec = parse_model_spec(f"openai-compatible:opt@{srv.openai_url}")
        got = await TrajectoryReflectionProposer(models, spec, count=2).propose(st)
    out = got.candidates
    assert len(seen) == 2  # one reflection per recurring kind, most frequent first
    # the two calls are concurrent: known by what each asks about, not by the order they arrived in
    first, second = sorted((r.last_user_text for r in seen), key=lambda t: 'here: "tests never run"' not in t)
    assert "- tests never run: 3\n- edit did not apply: 3\n- time-out: 1" in first
    assert 'here: "tests never run"' in first and 'here: "edit did not apply"' in second
    assert "3. sed -i 's/total = 0/total = 1/' pkg/core.pyy -> exit 2 [edit] -- it said: sed: can't read pkg/core.pyy" in first
    assert "1. sed -i 's/x = 1/x = 2/' pkg/cor.py -> exit 2 [edit]" in first
    assert "Tests: never run" in first and "stopped after 1 tool call" in first and "timed out after 60s" in first
    assert "## PASSED task t-claude" in first and "python -m pytest -q tests/test_core.py (exit 0)" in first
    assert all((r.json_schema or r.response_format["json_schema"]["schema"])[
        "properties"]["edits"]["maxItems"] == 1 for r in seen)  # one edit per reflection
    assert [c.origin for c in out] == ["trajectory-reflection"] * 2
    assert out[0].rationale.startswith("[tests never run] ") and out[0].sources[0] in ("t-codex", "t-mini-1")
    for c in out:
        assert len(c.edits) == 1 and apply_edits(SKILL, c.edits).applied
    assert len(got.reflections) == 2 and all(r.error is None for r in got.reflections)  # returned, not written into st


def python_sent_to_the_shell(name: str, turns: int) -> list:
    """mini-swe-agent shaped: the function's Python source sent as the command, `turns` times over."""
    source = f"import math\ndef {name}(x):\n    return math.floor(x)"
    shell = '[exit code 2]\n/bin/sh: 1: import: not found\n/bin/sh: 2: Syntax error: "(" unexpected\n'
    return [MessageEvent(role="user", text=f"write {name}"),
            *[e for i in range(1, turns + 1) for e in call(i, "bash", {"command": source}, shell, failed=True)]]


async def test_what_the_shell_refused_is_counted_once_a_rollout_and_asked_about():
    """Three rollouts that sent a function's Python source to /bin/sh, one of them three times: the
    optimizer is told what the shell said, each complaint counted once a rollout with what it was
    about (or the command it refused), and, for this kind, asked what the agent sent that a shell
    cannot run, and how to do it with commands a shell runs."""
    seen: list[FakeRequest] = []
    rollouts = [scored(f"t-{n}", python_sent_to_the_shell(n, k), 0.0, None)
                for n, k in (("floor_of", 3), ("ceil_of", 1), ("round_of", 1))]
    rollouts.append(scored("t-sed", mini_trace(1), 0.0, ""))  # sed's complaint is one rollout's: not counted
    tasks = {r.task_id: Task(id=r.task_id, prompt=r.prompt, kind="code") for r in rollouts}
    st = SearchState(step=1, version=0, skill=SKILL, scored=rollouts, tasks=tasks)
    with FakeModelServer(optimizer(seen)) as srv:
        models = Models(env=ProviderEnv(), meter=Meter())
        spec = parse_model_spec(f"openai-compatible:opt@{srv.openai_url}")
        await TrajectoryReflectionProposer(models, spec, count=1).propose(st)
    prompt = seen[0].last_user_text
    assert "- shell rejected a command: 3\n" in prompt and 'here: "tests never run"' in prompt  # 4 never tested
    assert ("- 'not found' in 3 of 4 (on 'import')\n"
            "- 'Syntax error: \"(\" unexpected' in 3 of 4 (on 'import math def floor_of(x): return math', "
            "'import math def ceil_of(x): return math.')\n") in prompt
    assert "can't read" not in prompt.split("# Current skill")[0]
    st.scored = st.scored[:3]  # now the shell's refusal is the most frequent kind
    with FakeModelServer(optimizer(seen)) as srv:
        models = Models(env=ProviderEnv(), meter=Meter())
        spec = parse_model_spec(f"openai-compatible:opt@{srv.openai_url}")
        await TrajectoryReflectionProposer(models, spec, count=1).propose(st)
    assert 'here: "shell rejected a command"' in seen[-1].last_user_text
    assert "what the agent sent that a\nshell cannot run" in seen[-1].last_user_text


def test_python_source_is_told_from_a_shell_command():
    assert python_source("import math\ndef f(x):\n    return math.floor(x)")
    assert python_source("# the packages\nfrom cmath import phase") and python_source("class A:\n    pass")
    assert not python_source("ls -la") and not python_source("x=1") and not python_source("echo 'hi'")
    assert not python_source("cat > solution.py <<'EOF'\ndef f(x):\n    return x\nEOF")
    ok = [*call(1, "bash", {"command": "def f(x): return x"}, "", failed=False)]
    assert not trajectory(ok, None, None).steps[0].python  # it ran: whatever ran it, nothing was refused


async def test_a_shell_rule_is_proposed_when_the_agent_sent_python_to_the_shell_twice():
    """Two failed rollouts sent Python source to /bin/sh: one `shell-rule` candidate, in fixed wording, added
    to the rules section, screened on those tasks first, then on other failed ones; none for one such
    rollout, none when the skill has it."""
    rollouts = [scored(f"t-{n}", python_sent_to_the_shell(n, 1), 0.0, None) for n in ("floor_of", "ceil_of")]
    rollouts.append(scored("t-sed", mini_trace(1), 0.0, ""))
    tasks = {r.task_id: Task(id=r.task_id, prompt=r.prompt, kind="code") for r in rollouts}
    st = SearchState(step=1, version=0, skill=SKILL, scored=rollouts, tasks=tasks)
    (c,) = (await ShellRuleProposer().propose(st)).candidates
    assert c.origin == "shell-rule" and c.sources == ["t-floor_of", "t-ceil_of", "t-sed"]  # those that sent it first
    assert c.rationale == "python-to-shell: 2 of 3 failed rollouts sent Python source to the shell as a command"
    new = apply_edits(SKILL, c.edits).skill.render()
    assert f"## Rules\n\n- {SHELL_RULE}" in new and "`cat > FILE <<'EOF'`" in new
    st.scored = rollouts[1:]
    assert not (await ShellRuleProposer().propose(st)).candidates
    st.scored, st.skill = rollouts, apply_edits(SKILL, c.edits).skill
    assert not (await ShellRuleProposer().propose(st)).candidates


async def test_procedure_contrasts_passing_and_failing_trajectories():
    seen: list[FakeRequest] = []
    st = state()
    found = {h.name: (h.passing, h.failing) for h in habits(
        [r for r in st.scored if not r.failed], [r for r in st.scored if r.failed])}
    assert found["ran the tests after its last edit"] == (1, 0) and found["left a diff"] == (1, 0)
    with FakeModelServer(optimizer(seen)) as srv:
        models = Models(env=ProviderEnv(), meter=Meter())
        spec = parse_model_spec(f"openai-compatible:opt@{srv.openai_url}")
        (c,) = (await ProcedureProposer(models, spec).propose(st)).candidates
    asked = seen[0].last_user_text
    assert "- ran the tests after its last edit: 1/1 passing, 0/3 failing" in asked
    assert "## FAILED task t-mini-1 (failure kinds: tests never run, edit did not apply)" in asked
    assert c.origin == "procedure" and len(c.edits) == 1
    result = apply_edits(SKILL, c.edits)
    assert result.applied and "## Procedure\n\n1. Read the failing test first.\n2. Find the code" in result.skill.body
    assert "4. Run the tests with python -m pytest -q before finishing." in result.skill.body
    # a second procedure replaces the first rather than stacking
    st2 = state()
    st2.skill = result.skill
    with FakeModelServer(optimizer([])) as srv:
        spec = parse_model_spec(f"openai-compatible:opt@{srv.openai_url}")
        (c2,) = (await ProcedureProposer(Models(env=ProviderEnv(), meter=Meter()), spec).propose(st2)).candidates
    assert c2.edits[0].op == "replace" and c2.edits[0].anchor == "Procedure"


async def test_demonstration_condenses_a_solved_trajectory_into_steps():
    st = state()
    (c,) = (await TrajectoryDemonstrationProposer().propose(st)).candidates
    assert c.origin == "trajectory-demonstration" and c.edits[0].evidence == ["t-claude"]
    text = c.edits[0].text
    assert text.startswith("## Example run\n")
    assert ("1. run the tests: `python -m pytest -q tests/test_core.py` (exit 1)\n"
            "2. edit: `Edit /w/pkg/core.py`\n3. run the tests: `python -m pytest -q tests/test_core.py` (exit 0)") in text
    assert "Result: 1 file (+1 -1): pkg/core.py" in text
    assert apply_edits(SKILL, c.edits).applied
    assert (await TrajectoryDemonstrationProposer().propose(SearchState(
        step=1, version=0, skill=SKILL, scored=[r for r in st.scored if r.failed], tasks=st.tasks))).candidates == []
    # the skill read and the submit echo are the harness's, a failed detour is dropped
    solved = trajectory([*mini_trace(1)[:5], *call(5, "bash", {"command": "python -m pytest -q"}, "1 passed")], None,
                        PATCH)
    assert [s.command for s in condense(solved)] == ["grep -rn total pkg/", "python -m pytest -q"]



def secret_code_agent(seen: list[FakeRequest], turn):
    """mini-swe-agent's model (its bash tool) on the secret-code items: reads the skill first, then
    `turn(req, done, n, text)` answers (`done` commands so far, `n` the item, `text` the conversation);
    the optimizer answers the chat requests without tools."""
    def script(req: FakeRequest) -> FakeReply:
        if not req.tools:
            return optimizer(seen)(req)
        done = len(req.tool_results)
        if done == 0:
            return FakeReply(text="Reading the skill.", tool_calls=(shell_call(req, f"cat {skill_path(req)}"),))
        text = "\n".join(m.text for m in req.messages)
        return turn(req, done, int(re.search(r"secret code of item (\d+)", text).group(1)), text)
    return script


def submit(req: FakeRequest, answer: str) -> FakeReply:
    return FakeReply(text="Done.", tool_calls=(shell_call(
        req, f"echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && echo 'Answer: {answer}'"),))


def agent_and_optimizer(seen: list[FakeRequest]):
    """Looks around after the skill (a command that fails on the items from 3 on), submits; right on the
    items below 3."""
    def turn(req: FakeRequest, done: int, n: int, text: str) -> FakeReply:
        if done == 1:
            return FakeReply(text="Looking.", tool_calls=(shell_call(req, "ls -a" if n < 3 else "ls no-such-dir"),))
        return submit(req, f"ZETA-{n}" if n < 3 else "unknown")
    return secret_code_agent(seen, turn)


def mini_swe_run(tmp_path, script, tasks: int, val: int, sets: tuple[str, ...]):
    """One step of a real `skillopt run` with the real mini-swe-agent in bubblewrap: `script` plays its
    model and the optimizer; 2 train tasks of `tasks` secret-code items, `val` validation, no test, and
    no chat-harness proposer. Returns the run's folder."""
    pytest.importorskip("minisweagent")
    bwrap()  # skips without bubblewrap
    data = write_jsonl(tmp_path / "codes.jsonl", code_tasks(tasks))
    with FakeModelServer(script) as srv:
        args = ["run", "--benchmark", str(data), "--harness", "mini-swe-agent",
                "--target_model", f"openai-compatible:fake-agent@{srv.openai_url}",
                "--optimizer_model", f"openai-compatible:fake-opt@{srv.openai_url}",
                "--run-id", "mini", "--epochs", "1", "--train-size", "2", "--val-size", str(val), "--test-size", "0",
                "--batch-size", "2", "--concurrency", "2", "--set", "train.consolidate=false",
                "--set", "train.max_reflections_per_step=0", "--set", "train.rules_per_step=0",
                "--set", "train.merge=false", "--set", "train.ablations_per_step=0", "--set", "limits.timeout_s=90",
                *[x for kv in sets for x in ("--set", kv)]]
        r = run_cli(args, tmp_path, cli_env(tmp_path), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return tmp_path / "runs" / "mini"


@pytest.mark.slow  # real mini-swe-agent rollouts (a few seconds each, more on a busy machine)
def test_a_training_step_with_mini_swe_agent_proposes_each_agent_candidate(tmp_path):
    seen: list[FakeRequest] = []
    # item-02 (solved) and item-04 (not) are the train batch of split seed 0
    run = mini_swe_run(tmp_path, agent_and_optimizer(seen), tasks=6, val=1, sets=(
        "train.screen=false", "train.trajectory_reflections=1"))
    rows = {x["task_id"]: x for x in map(json.loads, (run / "rollouts.jsonl").read_text().splitlines())
            if x["split"] == "train"}
    assert {k: v["hard"] for k, v in rows.items()} == {"item-02": 1.0, "item-04": 0.0}, "the split changed"
    cands = {c["origin"]: c for c in json.loads((run / "steps" / "0001" / "candidates.json").read_text())}
    assert set(cands) == {"trajectory-reflection", "procedure", "trajectory-demonstration"}
    assert all(c["applied"] == ["applied"] and c["version"] for c in cands.values())
    assert "1. `ls -a` (exit 0)" in cands["trajectory-demonstration"]["edits"][0]["text"]
    (reflection,) = [q.last_user_text for q in seen if "recurring failure" in q.last_user_text]
    # question tasks (kind qa): no failure kind applies; the commands and exit codes are still shown
    assert "Failure kinds over this batch (1 failed rollout):\n- none read from the traces" in reflection, reflection
    assert "2. ls no-such-dir -> exit 2" in reflection and "## FAILED task item-04" in reflection
    assert "1. cat .agents/skills/" in reflection and "-> exit 0" in reflection
    (procedure,) = [q.last_user_text for q in seen if "numbered procedure" in q.last_user_text]
    assert "- no command failed: 1/1 passing, 0/1 failing" in procedure


def python_or_file(seen: list[FakeRequest], solves: bool = True):
    """Under a skill that says where commands run it writes the code into a file with a heredoc, runs it
    and submits the right answer (`solves`; else it removes the file and submits a wrong one, as before);
    without, it sends the Python source itself as the command (the shell refuses it) and submits a wrong one."""
    def turn(req: FakeRequest, done: int, n: int, text: str) -> FakeReply:
        code = f"import sys\ndef code(n):\n    return 'ZETA-' + str(n)\nprint(code({n}))"
        told = "runs in a shell (/bin/sh)" in text
        if done == 1:
            command = (f"cat > code.py <<'EOF'\n{code}\nEOF\npython3 code.py" + ("" if solves else "; rm code.py")
                       if told else code)
            return FakeReply(text="Writing it.", tool_calls=(shell_call(req, command),))
        return submit(req, f"ZETA-{n}" if told and solves else "unknown")
    return secret_code_agent(seen, turn)


@pytest.mark.slow  # real mini-swe-agent rollouts in bubblewrap (a few seconds each)
def test_a_shell_rule_from_python_sent_to_the_shell_is_screened_gated_and_accepted(tmp_path):
    """The real mini-swe-agent sends Python source to /bin/sh in both train rollouts; the shell refuses it,
    the trajectories say so, and the step proposes the `shell-rule`, no optimizer call, which the screen
    and the gate (5 validation pairs, 5 won) accept: the whole path from a trace to an accepted edit."""
    seen: list[FakeRequest] = []
    run = mini_swe_run(tmp_path, python_or_file(seen), tasks=12, val=5, sets=(
        "train.procedure=false", "train.trajectory_reflections=0", "train.trajectory_demonstration=false",
        "train.form_rules=false"))
    (c,) = json.loads((run / "steps" / "0001" / "candidates.json").read_text())
    assert c["origin"] == "shell-rule" and c["status"] == "accepted", c
    assert c["rationale"] == "python-to-shell: 2 of 2 failed rollouts sent Python source to the shell as a command"
    assert c["screen"]["candidate"] == [1.0, 1.0] and c["gate"]["wins"] == 5 and c["gate"]["losses"] == 0
    assert SHELL_RULE in (run / "best_skill.md").read_text()
    assert not seen  # fixed wording: no optimizer call


@pytest.mark.slow  # real mini-swe-agent rollouts in bubblewrap (a few seconds each)
def test_a_shell_rule_that_stops_python_going_to_the_shell_passes_its_screen_on_a_tie(tmp_path):
    """Under the rule the agent writes and runs a file, yet answers as wrongly as before and leaves the
    workspace as it was: the screen ties 0 vs 0 with the replies unchanged, which alone would turn the rule
    away; the failure it aims at (Python sent to the shell) went from 2 rollouts to 0, so it is gated (and
    rejected there: no validation pair is won)."""
    seen: list[FakeRequest] = []
    run = mini_swe_run(tmp_path, python_or_file(seen, solves=False), tasks=12, val=3, sets=(
        "train.procedure=false", "train.trajectory_reflections=0", "train.trajectory_demonstration=false",
        "train.form_rules=false"))
    (c,) = json.loads((run / "steps" / "0001" / "candidates.json").read_text())
    assert c["origin"] == "shell-rule" and c["aim"] == "python sent to the shell", c
    sc = c["screen"]
    assert sc["incumbent"] == sc["candidate"] == [0.0, 0.0] and sc["changed"] == 0, sc
    assert (sc["aimed_incumbent"], sc["aimed_candidate"]) == (2, 0), sc
    assert c["status"] == "rejected" and c["gate"]["wins"] == 0, c


def test_a_screen_tie_passes_when_the_aimed_failure_fell_by_half_and_nothing_was_lost():
    from skillopt.record import ScreenResult

    def result(cand: list[float], aimed: tuple[int, int] | None, changed: int = 0) -> ScreenResult:
        counts = {} if aimed is None else {"aimed_incumbent": aimed[0], "aimed_candidate": aimed[1]}
        return ScreenResult(tasks=["a", "b", "c", "d"], incumbent=[0.0, 0.0, 0.0, 1.0], candidate=cand,
                            changed=changed, **counts)

    tie = [0.0, 0.0, 0.0, 1.0]
    assert not result(tie, None).passed and not result(tie, (4, 4)).passed
    assert result(tie, (4, 1)).passed and result(tie, (4, 2)).passed and result(tie, (2, 1)).passed
    assert not result(tie, (4, 3)).passed and not result(tie, (0, 0)).passed
    assert not result([1.0, 0.0, 0.0, 0.0], (4, 0)).passed, "a lost task is not made up by the aim"
    assert result(tie, None, changed=3).passed and result([1.0, 0.0, 0.0, 1.0], (4, 4)).passed
    assert result(tie, (4, 1)).removed == 3 and result(tie, None).removed == 0


async def test_an_example_run_shows_the_file_the_agent_wrote_whole_beside_the_teachers():
    """A mini-swe-agent rollout that solved its task by writing solution.py with a heredoc (and never
    submitting) becomes an example run that shows that command whole, as the agent's reply holds it, then
    the submit command; the teacher's verified function for a failed code task is a second candidate."""
    import skillopt.benchmarks as bm
    from skillopt.benchmarks.code import reference_code
    from skillopt.harness.mini_swe_agent import MiniSweAgentHarness
    from skillopt.optimizer.agent import ActionForm
    from skillopt.optimizer.demonstrate import Teacher

    bench = bm.get_benchmark("mbpp")
    solved, failed = bench.tasks("all")[:2]
    write = "# the function\ncat <<EOF > solution.py\ndef volume(a, b, c):\n    return a * b * c\n"
    events = [MessageEvent(role="user", text=solved.prompt),
              *call(1, "bash", {"command": "def volume(a, b, c):\n    return a * b * c"},
                    '[exit code 2]\n/bin/sh: 1: Syntax error: "(" unexpected', failed=True),
              *call(2, "bash", {"command": write}, ""), *call(3, "bash", {"command": write}, "")]
    rollouts = [ScoredRollout(task_id=solved.id, prompt=solved.prompt, reference="", output="", hard=1.0, soft=1.0,
                              feedback="passed", summary="", trajectory=trajectory(events, None, None)),
                ScoredRollout(task_id=failed.id, prompt=failed.prompt, reference="", output="", hard=0.0, soft=0.0,
                              feedback="failed", summary="", trajectory=trajectory(events[:3], None, None))]
    st = SearchState(step=1, version=0, skill=SKILL, scored=rollouts, tasks={solved.id: solved, failed.id: failed})
    form = ActionForm(lambda c: f"```mswea_bash_command\n{c}\n```", MiniSweAgentHarness.submit_command)
    with FakeModelServer(lambda req: FakeReply(text=f"```python\n{reference_code(failed)}\n```")) as srv:
        spec = parse_model_spec(f"openai-compatible:fake-opt@{srv.openai_url}")
        teacher = Teacher(Models(env=ProviderEnv(), meter=Meter()), spec, bench)
        got = await TrajectoryDemonstrationProposer(teacher, form).propose(st)
    by = {c.origin: c.edits[0].text for c in got.candidates}
    assert set(by) == {"trajectory-demonstration", "teacher-example"}
    assert ("1. edit (exit 0):\n\n```mswea_bash_command\n# the function\ncat <<EOF > solution.py\n"
            "def volume(a, b, c):\n    return a * b * c\n```\n\n2. Submit:\n\n```mswea_bash_command\n"
            "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```") in by["trajectory-demonstration"]
    assert "Syntax error" not in by["trajectory-demonstration"]  # the failed detour is dropped
    assert reference_code(failed).strip().splitlines()[0] in by["teacher-example"]
    assert all(apply_edits(SKILL, c.edits).applied for c in got.candidates)
