"""The mini-swe-agent harness runs the real `mini-swe-agent` package (its DefaultAgent loop, LitellmModel
and LocalEnvironment) in a child process, in the bubblewrap sandbox, against the fake model server
through the relay: the skill named in its instance template and read with `cat`, the normalized
trace and its summary, token usage, and a swe-local task solved end to end through the CLI with its
patch graded by the hidden tests."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest

from skillopt.benchmarks.base import Task
from skillopt.errors import BadInput
from skillopt.harness.agent_env import DUMMY_KEY
from skillopt.harness.base import Limits, Rollout
from skillopt.harness.registry import HarnessContext, check_compatible, make_harness
from skillopt.harness.workspace import write_skill
from skillopt.models import Models, ProviderEnv
from skillopt.models.spec import parse_model_spec
from skillopt.sandbox import Relay
from skillopt.skill import Skill
from skillopt.traces.events import ErrorEvent, MessageEvent, SkillUsedEvent, ToolCallEvent, ToolResultEvent, UsageEvent
from skillopt.traces.outcome import failure_kinds
from skillopt.traces.summary import summarize
from tests.fakes.agent_scripts import shell_call
from tests.fakes.server import FakeModelServer, FakeReply, FakeRequest
from tests.helpers import cli_env, run_cli

# found, not imported: importing the package writes its config folder under the user's home
pytestmark = pytest.mark.skipif(importlib.util.find_spec("minisweagent") is None,
                                reason='pip install "skillopt[mini-swe-agent]"')

SKILL = Skill.parse("---\nname: mathy\ndescription: Use this skill for arithmetic word problems.\n---\n"
                    "# Mathy\nWork it out with python, then end with 'Answer: <number>'.\n")
TASK = Task(id="six-by-seven", prompt="What is 6*7? End with 'Answer: <number>'.")
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
SKILL_PATH = re.compile(r"`(\.agents/skills/[^`]+/SKILL\.md)`")


def skill_path(req: FakeRequest) -> str:
    """The skill's path as the instance template names it."""
    found = SKILL_PATH.search("\n".join(m.text for m in req.messages))
    assert found, "the instance template does not name the skill"
    return found.group(1)


def steps(*commands: str):
    """The model: the skill first, then one command per turn, then `commands[-1]` forever."""
    def script(req: FakeRequest) -> FakeReply:
        done = len(req.tool_results)
        if done == 0:
            return FakeReply(text="Reading the skill.", tool_calls=(shell_call(req, f"cat {skill_path(req)}"),),
                             usage=(100, 10))
        return FakeReply(text=f"Step {done}.", tool_calls=(shell_call(req, commands[min(done - 1, len(commands) - 1)]),),
                         usage=(100, 10))
    return script


def bwrap():
    from skillopt.sandbox.bwrap import Bubblewrap, check_bwrap

    try:
        return Bubblewrap(check_bwrap())
    except BadInput as e:
        pytest.skip(str(e))


async def rollout(srv: FakeModelServer, tmp_path: Path, limits: Limits | None = None, **options) -> tuple[Rollout, Path]:
    with Relay() as relay:
        harness = make_harness("mini-swe-agent", HarnessContext(models=Models(env=ProviderEnv()), options=options,
                                                                 sandbox=bwrap(), relay=relay))
        ws = tmp_path / "ws"
        ws.mkdir(parents=True)
        write_skill(ws, SKILL, harness.skill_dir)
        target = parse_model_spec(f"openai-compatible:fake-model@{srv.openai_url}")
        return await harness.run(TASK, SKILL, ws, target, limits or Limits(timeout_s=90)), ws


async def test_rollout_reads_the_skill_named_in_its_instance_template(tmp_path):
    script = steps("python3 -c 'print(6*7)'; echo $SKILLOPT_MINI_API_KEY; ls no-such-file",
                   f"{SUBMIT} && echo 'Answer: 42'")
    with FakeModelServer(script) as srv:
        r, ws = await rollout(srv, tmp_path)
    assert r.error is None, r.error
    assert r.output.text == "Answer: 42" and r.output.patch is None
    assert isinstance(r.trace[0], MessageEvent) and r.trace[0].text == TASK.prompt
    calls = [e for e in r.trace if isinstance(e, ToolCallEvent)]
    assert [c.name for c in calls] == ["bash"] * 3
    assert calls[0].input == {"command": "cat .agents/skills/mathy/SKILL.md"}
    assert [e.how for e in r.trace if isinstance(e, SkillUsedEvent)] == ["read SKILL.md (bash)"]
    results = {e.id: e for e in r.trace if isinstance(e, ToolResultEvent)}
    assert "name: mathy" in results[calls[0].id].output and not results[calls[0].id].is_error
    failed = results[calls[1].id]
    assert failed.is_error and failed.output.startswith("[exit code 2]\n42\n")
    assert "skr-" not in failed.output  # the relay's token is not in the commands' environment
    usage = [e for e in r.trace if isinstance(e, UsageEvent)]
    assert len(usage) == 1 and usage[0].turns == 3 and r.usage.calls == 3
    assert (r.usage.input_tokens, r.usage.output_tokens) == (300, 30)
    s = summarize(r.trace, r.error)
    assert "skill: discovered natively; used (read SKILL.md (bash) at call 1)" in s
    assert "turns=3, tool calls=3 (1 failed)" in s and "final answer (10 chars, 1 line): Answer: 42" in s
    # what the model saw: mini-swe-agent's own prompts, the skill named after the task, the bash tool
    assert srv.requests[0].path == "/v1/chat/completions"
    first = srv.calls[0]
    assert first.model == "fake-model" and [t.name for t in first.tools] == ["bash"]
    instance = first.messages[0].text
    assert instance.startswith(f"Please solve this issue: {TASK.prompt}\n\n## Skill")
    assert "`.agents/skills/mathy/SKILL.md`" in instance and "arithmetic word problems" in instance
    assert "mathy" not in first.system  # mini.yaml's own system prompt
    # the relay put the key in place of the agent's token
    assert all(req.headers.get("authorization") == f"Bearer {DUMMY_KEY}" for req in srv.requests)
    assert json.loads((ws / ".home" / "mini-swe-agent" / "trajectory.json").read_text())["info"]["exit_status"] == "Submitted"


async def test_step_limit_and_format_errors_end_as_failed_rollouts(tmp_path):
    def no_action(req: FakeRequest) -> FakeReply:
        return FakeReply(text="I think the answer is 42.")  # never a tool call

    with FakeModelServer(no_action) as srv:
        r, _ = await rollout(srv, tmp_path)
    assert r.error and "no valid action" in r.error and r.error_kind == "agent"
    assert len([e for e in r.trace if isinstance(e, ErrorEvent) and e.message.startswith("format error")]) == 3
    said = [e.text for e in r.trace if isinstance(e, MessageEvent) and e.role == "assistant"]
    assert said == ["I think the answer is 42."] * 3  # the rejected replies stay in the trace
    with FakeModelServer(steps("echo again")) as srv:
        r, _ = await rollout(srv, tmp_path / "limit", limits=Limits(timeout_s=90, max_turns=3))
    assert r.error and "stopped after 3 model calls (max_turns)" in r.error
    assert len([e for e in r.trace if isinstance(e, ToolCallEvent)]) == 3


def test_only_chat_targets_are_accepted():
    for ok in ("openai:gpt-5-mini", "vllm:m@http://h:8000/v1", "openai-compatible:m@http://h/v1", "local:qwen2.5-coder-0.5b"):
        check_compatible("mini-swe-agent", parse_model_spec(ok))
    with pytest.raises(BadInput, match="chat API"):
        check_compatible("mini-swe-agent", parse_model_spec("anthropic:claude-haiku-4-5"))


TOOLZ = "toolz-1.2.0-001"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None, reason="git is needed to materialize the repositories")
def test_swe_local_task_solved_end_to_end_and_graded(tmp_path):
    pytest.importorskip("swebench", reason="the swe extra is not installed")
    from skillopt.benchmarks.swe_local import SHIPPED_TASKS

    row = next(json.loads(line) for line in SHIPPED_TASKS.read_text().splitlines() if TOOLZ in line)
    fix = f"cat > /tmp/fix.patch <<'EOF'\n{row['patch']}EOF\ngit apply /tmp/fix.patch && git status --short"
    skill = tmp_path / "SKILL.md"
    skill.write_text("---\nname: fixer\ndescription: Fix a bug in a Python package.\n---\n# Fixer\nApply the fix.\n")
    with FakeModelServer(steps(fix, SUBMIT)) as srv:
        r = run_cli(["eval", "--skill", str(skill), "--benchmark", "swe-local", "--split", "all",
                     "--set", f"benchmark_options.instance_ids={TOOLZ}", "--harness", "mini-swe-agent",
                     "--target_model", f"openai-compatible:fake-agent@{srv.openai_url}", "--set", "limits.timeout_s=120"],
                    tmp_path, cli_env(tmp_path), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    run = next(p for p in (tmp_path / "runs").iterdir() if p.name.startswith("eval-"))
    rows = [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and not rows[0]["error"], rows[0]["error"]
    assert rows[0]["hard"] == 1.0, (rows[0]["feedback"], rows[0]["patch"], (run / rows[0]["trace_file"]).read_text()[-3000:])
    assert "resolved" in rows[0]["feedback"].lower()
    assert rows[0]["patch"] and ".agents" not in rows[0]["patch"] and ".home" not in rows[0]["patch"]
    assert rows[0]["skill_used"] is True
    trace = (run / rows[0]["trace_file"]).read_text()
    assert '"name":"bash"' in trace.replace(" ", "") and "git apply /tmp/fix.patch" in trace


CALC = {"calc.py": "def add(a, b):\n    return a - b\n",
        "test_calc.py": "from calc import add\n\nassert add(2, 3) == 5, f'add(2, 3) == {add(2, 3)}'\nprint('all passed')\n"}
CALC_TASK = Task(id="calc", kind="code", prompt="add() is wrong: fix it.", files=CALC)


async def test_summary_holds_against_the_raw_trace_it_came_from(tmp_path):
    """Every command's exit code, the last test run's output, the diff and the stop in the summary
    are those of the agent's own log (the driver's JSON lines), read here independently."""
    script = steps("python3 test_calc.py", "sed -i 's/a - b/a + b/' calc.py", "python3 test_calc.py", SUBMIT)
    with FakeModelServer(script) as srv, Relay() as relay:
        harness = make_harness("mini-swe-agent", HarnessContext(models=Models(env=ProviderEnv()), sandbox=bwrap(),
                                                                 relay=relay))
        ws = tmp_path / "ws"
        ws.mkdir()
        for name, text in CALC.items():
            (ws / name).write_text(text)
        write_skill(ws, SKILL, harness.skill_dir)
        target = parse_model_spec(f"openai-compatible:fake-model@{srv.openai_url}")
        r = await harness.run(CALC_TASK, SKILL, ws, target, Limits(timeout_s=90))
    assert r.error is None, r.error
    raw = [json.loads(line) for line in (r.raw_log or "").splitlines() if line.startswith('{"mini"')]
    messages = [e["message"] for e in raw if e["mini"] == "message"]
    commands = [a["command"] for m in messages if m["role"] == "assistant" for a in m["extra"]["actions"]]
    outputs = [m["extra"] for m in messages if m["role"] == "tool"]
    assert len(commands) == 5 and len(outputs) == 4  # the submitting command has no output of its own
    s = summarize(r.trace, r.error, budget_tokens=600, patch=r.output.patch)
    codes = ", ".join(f"#{i + 1}:{o['returncode']}" for i, o in enumerate(outputs)) + ", #5:0"
    assert f"shell commands: 5 (1 failed); exit codes {codes}" in s
    assert codes.startswith("#1:0, #2:1, #3:0, #4:0")
    first_test = outputs[1]["raw_output"]
    assert "AssertionError: add(2, 3) == -1" in first_test and "  2. bash(command=python3 test_calc.py) -> FAILED (exit 1)" in s
    last_test = outputs[3]["raw_output"].strip()
    assert f"last test run (call #4, 2 test runs): `python3 test_calc.py` -> exit 0; output tail: {last_test}" in s
    assert "diff: 1 file (+1 -1): calc.py" in s and "diff lines: - return a - b ⏎ + return a + b" in s
    assert raw[-1] == {"mini": "done", "exit_status": "Submitted", "submission": "", "api_calls": 5}
    assert "submitted after 5 tool calls, the last `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` (exit 0)" in s
    assert failure_kinds(r.trace, r.error, r.output.patch, gold_files=["calc.py"]) == []
    assert failure_kinds(r.trace, r.error, r.output.patch, gold_files=["other.py"]) == ["wrong file"]


async def test_text_actions_with_the_packages_textbased_config(tmp_path):
    """`action_format=text`: mini_textbased.yaml, one fenced `mswea_bash_command` block a reply, no tools."""
    def fenced(req: FakeRequest) -> FakeReply:
        command = f"cat {skill_path(req)}" if not any(m.role == "user" and "<returncode>" in m.text
                                                      for m in req.messages) else f"{SUBMIT} && echo 'Answer: 42'"
        return FakeReply(text=f"THOUGHT: next.\n\n```mswea_bash_command\n{command}\n```")

    with FakeModelServer(fenced) as srv:
        r, _ = await rollout(srv, tmp_path, action_format="text")
    assert r.error is None, r.error
    assert r.output.text == "Answer: 42" and not srv.calls[0].tools
    assert [e.how for e in r.trace if isinstance(e, SkillUsedEvent)] == ["read SKILL.md (bash)"]
    calls = [e for e in r.trace if isinstance(e, ToolCallEvent)]
    results = {e.id: e for e in r.trace if isinstance(e, ToolResultEvent)}
    assert len(calls) == 2 and "name: mathy" in results[calls[0].id].output


async def test_a_plain_format_error_shows_no_placeholder_to_run(tmp_path):
    """`format_error=plain`: a reply with two command blocks is told the rule in words; the package's own
    message shows an example block holding `<action>`, which the 1.5B ran as its next command."""
    def two_then_one(req: FakeRequest) -> FakeReply:
        if not any("mswea_bash_command blocks" in m.text or "<action>" in m.text for m in req.messages):
            return FakeReply(text="```mswea_bash_command\nls\n```\n```mswea_bash_command\npwd\n```")
        return FakeReply(text=f"THOUGHT: done.\n\n```mswea_bash_command\n{SUBMIT} && echo 'Answer: 42'\n```")

    told = {}
    for how in ("package", "plain"):
        with FakeModelServer(two_then_one) as srv:
            r, _ = await rollout(srv, tmp_path / how, action_format="text", format_error=how)
        assert r.error is None and r.output.text == "Answer: 42", r.error
        told[how] = srv.calls[1].messages[-1].text
    assert "<action>" in told["package"]
    assert "<action>" not in told["plain"] and "held 2 ```mswea_bash_command blocks" in told["plain"]
    assert "```mswea_bash_command\n" not in told["plain"]  # no example block to copy


async def test_the_example_response_can_be_left_out_of_the_instance_template(tmp_path):
    """`example_response=false`: the package's instance template without its example (`ls -la`), which
    the 1.5B ran as its first command; the rest of the template and the skill's text stay."""
    def submit(req: FakeRequest) -> FakeReply:
        return FakeReply(text=f"THOUGHT: done.\n\n```mswea_bash_command\n{SUBMIT} && echo 'Answer: 42'\n```")

    shown = {}
    for keep in (True, False):
        with FakeModelServer(submit) as srv:
            r, _ = await rollout(srv, tmp_path / str(keep), action_format="text", skill_in_prompt=True,
                                 example_response=keep)
        assert r.error is None, r.error
        shown[keep] = srv.calls[0].messages[-1].text
    assert "<example_response>" in shown[True] and "ls -la" in shown[True]
    assert "<example_response>" not in shown[False] and "ls -la" not in shown[False]
    for kept in ("Useful command examples", "cat <<'EOF' > newfile.py", "Work it out with python",
                 "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"):
        assert kept in shown[False], kept


async def test_the_skills_text_in_the_instance_template_for_a_model_that_reads_no_file(tmp_path):
    """`skill_in_prompt=true`: the skill's text is in the instance template (a small model seldom
    runs the `cat` it is pointed to: the 1.5B never did), so the skill counts as used without a
    read, and the agent is not asked to read it."""
    def fenced(req: FakeRequest) -> FakeReply:
        return FakeReply(text=f"THOUGHT: done.\n\n```mswea_bash_command\n{SUBMIT} && echo 'Answer: 42'\n```")

    with FakeModelServer(fenced) as srv:
        r, ws = await rollout(srv, tmp_path, action_format="text", skill_in_prompt=True)
    assert r.error is None, r.error
    instance = srv.calls[0].messages[-1].text
    assert "Work it out with python, then end with 'Answer: <number>'." in instance
    assert "`.agents/skills/mathy/SKILL.md`" in instance and "Read it first" not in instance
    assert "skillopt:" not in instance and "description:" not in instance  # the body as deployed, no front matter
    assert [e.how for e in r.trace if isinstance(e, SkillUsedEvent)] == ["in its instance template"]
    assert "skill: discovered natively; used (in its instance template" in summarize(r.trace, r.error)
    assert (ws / ".agents" / "skills" / "mathy" / "SKILL.md").is_file()  # still there for the files it names


async def test_the_skills_text_can_stand_last_in_the_instance_template(tmp_path):
    """`skill_position=end`: the skill's paragraph after the package's workflow and command examples, the
    last thing the model reads (the default puts it right after the task, where the 1.5B's replies followed
    the task's own wording and the package's examples instead)."""
    def fenced(req: FakeRequest) -> FakeReply:
        return FakeReply(text=f"THOUGHT: done.\n\n```mswea_bash_command\n{SUBMIT} && echo 'Answer: 42'\n```")

    shown = {}
    for position in ("task", "end"):
        with FakeModelServer(fenced) as srv:
            r, _ = await rollout(srv, tmp_path / position, action_format="text", skill_in_prompt=True,
                                 skill_position=position)
        assert r.error is None, r.error
        shown[position] = srv.calls[0].messages[-1].text
    rule = "Work it out with python, then end with 'Answer: <number>'."
    for position, text in shown.items():
        assert text.count(rule) == 1 and "What is 6*7?" in text and "Useful command examples" in text, position
    task, end = shown["task"], shown["end"]
    assert task.index(rule) < task.index("Useful command examples")
    assert end.index("Useful command examples") < end.index(rule)
    assert end.rstrip().endswith("everything printed after that first line is your answer.")


def test_a_skill_position_the_harness_does_not_know_is_refused():
    with pytest.raises(BadInput, match="skill_position"):
        make_harness("mini-swe-agent", HarnessContext(models=Models(env=ProviderEnv()),
                                                      options={"skill_position": "middle"}))
