"""Trace summaries for the optimizer: faithful, deterministic, within the token budget; and
`skillopt traces show`, which prints a stored trace."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from skillopt.traces.events import (
    ErrorEvent, MessageEvent, SkillUsedEvent, ToolCallEvent, ToolResultEvent, UsageEvent,
)
from skillopt.traces.summary import CHARS_PER_TOKEN, discovery_event, head_tail, summarize
from skillopt.config import StoredConfig


def agent_trace(n_calls: int = 2, fail_every: int = 0, output: str = "ok", answer: str = "Done.\nAnswer: 42"):
    events = [MessageEvent(role="user", text="What is 6*7?"), discovery_event("mathy", ["mathy", "other"]),
              ToolCallEvent(id="s", name="Skill", input={"skill": "mathy"}), SkillUsedEvent(name="mathy", how="Skill tool"),
              ToolResultEvent(id="s", output="Launching skill: mathy")]
    for i in range(n_calls):
        failed = bool(fail_every) and i % fail_every == fail_every - 1
        events += [ToolCallEvent(id=f"c{i}", name="Bash", input={"command": f"step {i}", "description": "x"}),
                   ToolResultEvent(id=f"c{i}", output=(f"error in step {i}\n" if failed else "") + output,
                                   is_error=failed)]
    events += [MessageEvent(role="assistant", text=answer), UsageEvent(input_tokens=100, output_tokens=20, turns=n_calls + 2)]
    return events


def test_summary_reports_skill_tools_failures_turns_and_answer_shape():
    s = summarize(agent_trace(n_calls=3, fail_every=2))
    lines = s.splitlines()
    assert lines[0] == "skill: discovered natively; used (Skill tool at call 1)"
    assert lines[1] == "turns=5, tool calls=4 (1 failed), tokens in/out=100/20"
    assert "  1. Skill(skill=mathy) -> ok (loads the skill)" in lines and "Launching skill" not in s
    assert "  3. Bash(command=step 1) -> FAILED" in lines
    assert "     err: error in step 1 ⏎ ok" in lines
    assert lines[-1] == "final answer (16 chars, 2 lines): Done. ⏎ Answer: 42"


def test_summary_says_when_the_skill_was_not_discovered_or_not_used():
    hidden = [MessageEvent(role="user", text="q"), discovery_event("mathy", ["other"]),
              MessageEvent(role="assistant", text="42")]
    assert summarize(hidden).splitlines()[0] == "skill: NOT discovered by the agent (listed: other); NOT used"
    unused = [discovery_event("mathy", ["mathy"]), MessageEvent(role="assistant", text="42")]
    assert summarize(unused).splitlines()[0] == "skill: discovered natively; NOT used"
    chat = [MessageEvent(role="system", text="You are..."), SkillUsedEvent(name="mathy", how="system prompt"),
            MessageEvent(role="assistant", text="42")]
    assert summarize(chat).splitlines()[0] == "skill: given in the system prompt"


def test_errors_are_listed_once_and_an_empty_answer_is_shown():
    events = [ErrorEvent(message="model API retry 1/2: 529"), ErrorEvent(message="model API retry 1/2: 529"),
              ErrorEvent(message="timed out after 60s")]
    s = summarize(events, error="timed out after 60s")
    assert s.count("error: model API retry 1/2: 529") == 1 and s.count("error: timed out after 60s") == 1
    assert s.endswith("final answer: <empty>")


def test_long_outputs_keep_their_head_and_tail():
    out = "HEAD " + "x" * 5000 + " TAIL"
    s = summarize(agent_trace(n_calls=1, fail_every=1, output=out))
    err = next(line for line in s.splitlines() if line.strip().startswith("err:"))
    assert "error in step 0" in err and err.rstrip().endswith("TAIL") and "chars cut" in err


@pytest.mark.parametrize("budget", [60, 100, 200, 400, 1000])
@pytest.mark.parametrize("n_calls", [0, 3, 40, 300])
def test_summary_stays_within_its_budget_and_is_deterministic(budget, n_calls):
    events = agent_trace(n_calls=n_calls, fail_every=7, output="line\n" * 200, answer="word " * 500)
    s = summarize(events, error="boom", budget_tokens=budget)
    assert len(s) <= max(200, budget * CHARS_PER_TOKEN)
    assert s == summarize(list(events), error="boom", budget_tokens=budget)
    assert s.startswith("skill: discovered natively")


def test_over_budget_the_middle_calls_go_first_and_failures_stay():
    events = agent_trace(n_calls=60, fail_every=29)  # steps 28 and 57 fail: calls 30 and 59 (after the Skill call)
    s = summarize(events, budget_tokens=200)
    assert len(s) <= 800 and "  1. Skill(skill=mathy) -> ok (loads the skill)" in s
    assert "  30. Bash(command=step 28) -> FAILED\n     err: error in step 28" in s
    assert "  59. Bash(command=step 57) -> FAILED" in s and "  61. Bash(command=step 59) -> ok" in s
    assert "calls omitted (0 failed) ..." in s and "final answer (" in s


def test_head_tail_marks_the_cut():
    assert head_tail("short", 10) == "short"
    cut = head_tail("a" * 50 + "b" * 50, 40)
    assert len(cut) <= 40 and cut.startswith("a" * 8) and cut.endswith("b" * 8) and "chars cut...]" in cut


def test_traces_show_prints_a_stored_rollout(tmp_path):
    from skillopt.cli import traces  # noqa: F401  (registers `traces` on the app)
    from skillopt.cli.app import app
    from skillopt.store.schema import RolloutRecord
    from skillopt.store.run_store import RunStore

    store = RunStore.create(tmp_path / "runs", "r1")
    store.write_config(StoredConfig.model_validate({"benchmark": "b", "harness": "claude-code"}))
    events = agent_trace()
    rel = store.write_trace("t1", "k" * 64, events, '{"type": "system", "subtype": "init"}\n')
    store.append_rollout(RolloutRecord(key="k" * 64, task_id="t1", split="train", version=0, skill_sha="s",
                                       harness="claude-code", model="anthropic:fake", hard=1, soft=1,
                                       output="Answer: 42", summary=summarize(events), trace_file=rel))
    runner = CliRunner()
    res = runner.invoke(app, ["--runs-dir", str(tmp_path / "runs"), "traces", "show", "r1", "t1", "--raw"])
    assert res.exit_code == 0, res.output
    assert "== t1  v000  train  trial 0  claude-code / anthropic:fake" in res.output
    assert "skill: discovered natively; used (Skill tool at call 1)" in res.output
    assert "call Bash " + json.dumps({"command": "step 0", "description": "x"}) in res.output
    assert "skill used: mathy (Skill tool)" in res.output and '"subtype": "init"' in res.output
    missing = runner.invoke(app, ["--runs-dir", str(tmp_path / "runs"), "traces", "show", "r1", "nope"])
    assert missing.exit_code == 2 and "no rollout of task 'nope'" in missing.output and "t1" in missing.output


def test_traces_show_says_what_a_power_loss_took(tmp_path):
    """Trace files are written unsynced (the grouped writer fsyncs rollouts.jsonl only): after a power
    loss a trace may be empty or cut short, and `traces show` says so instead of failing."""
    from skillopt.cli import traces  # noqa: F401  (registers `traces` on the app)
    from skillopt.cli.app import app
    from skillopt.store.schema import RolloutRecord
    from skillopt.store.run_store import RunStore

    store = RunStore.create(tmp_path / "runs", "r1")
    store.write_config(StoredConfig.model_validate({"benchmark": "b", "harness": "chat"}))
    for task, text in (("cut", agent_trace()[0].model_dump_json() + '\n{"type": "mess'), ("empty", "")):
        rel = store.trace_path(task, task * 30)
        (store.root / rel).parent.mkdir(parents=True, exist_ok=True)
        (store.root / rel).write_text(text)
        store.append_rollout(RolloutRecord(key=task * 30, task_id=task, split="train", version=0, skill_sha="s",
                                           harness="chat", model="m", trace_file=rel))
    runner = CliRunner()
    cut = runner.invoke(app, ["--runs-dir", str(tmp_path / "runs"), "traces", "show", "r1", "cut"])
    assert cut.exit_code == 0 and "the rest of the trace was lost" in cut.output
    empty = runner.invoke(app, ["--runs-dir", str(tmp_path / "runs"), "traces", "show", "r1", "empty"])
    assert empty.exit_code == 0 and "the trace file is empty" in empty.output
