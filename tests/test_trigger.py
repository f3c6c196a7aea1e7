"""Skill triggering with the real Claude Code binary: a description the scripted agent ignores, one it
triggers on, the trigger rate per version in `runs show`, `compare` and the report, and a run that
trains the description (`--train-description`) through the same gated loop.

The fake agent loads the skill (the Skill tool) only when the skill list Claude Code sends it holds
the trigger phrase, as a real model decides from the description; the seed skill's body holds the
rule that answers the task, so a loaded skill is a solved task.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.fakes.agent_scripts import use_skill_call
from tests.fakes.server import FakeModelServer, FakeReply, FakeRequest
from tests.helpers import cli_env, run_cli, write_jsonl
from tests.test_train_e2e import RULE, code_tasks

pytest.importorskip("claude_agent_sdk", reason="the claude-code extra (bundles Claude Code) is not installed")

TRIGGER = "whenever a question asks for an item's code"
IGNORED = "General notes."
SEED = f"---\nname: code-book\ndescription: {IGNORED}\n---\n# Code book\n\n{RULE}\n\n## Answer format\nEnd with 'Answer: <code>'.\n"


class Agent:
    """Claude Code's model (Messages API) and the optimizer (chat API) on one fake server."""

    def __init__(self) -> None:
        self.described = 0

    def __call__(self, req: FakeRequest) -> FakeReply:
        if req.api == "chat":
            return self.optimizer(req.last_user_text)
        if not req.tools:  # side calls (titles, summaries)
            return FakeReply(text="ok")
        shown = json.dumps(req.body)
        loaded = any(RULE in m.text for m in req.messages)
        item = re.search(r"secret code of item (\d+)", " ".join(m.text for m in req.messages if m.role == "user"))
        if not req.tool_results and TRIGGER in shown:  # the description says to use it here
            return FakeReply(text="This calls for the code-book skill.", tool_calls=[use_skill_call(req, "code-book")])
        answer = f"ZETA-{item.group(1)}" if loaded and item else "unknown"
        return FakeReply(text=f"Answer: {answer}")

    def optimizer(self, prompt: str) -> FakeReply:
        if "You write the description of a skill" in prompt:
            self.described += 1
            return FakeReply(text=json.dumps({"analysis": "it never says when to use it",
                                              "description": f"Use this skill {TRIGGER}."}))
        if "You improve a skill" in prompt:
            edit = {"op": "add", "anchor": "", "text": "Be concise and polite.", "rationale": "style", "evidence": []}
            return FakeReply(text=json.dumps({"analysis": "style", "edits": [edit]}))
        return FakeReply(text="Answer: unknown")


def test_description_training_raises_the_trigger_rate_and_it_is_reported(tmp_path):
    data = write_jsonl(tmp_path / "codes.jsonl", code_tasks(6))
    seed = tmp_path / "SKILL.md"
    seed.write_text(SEED)
    agent = Agent()
    env = cli_env(tmp_path)
    with FakeModelServer(agent) as srv:
        args = ["run", "--benchmark", str(data), "--harness", "claude-code", "--harness-mode", "cli",
                "--target-model", f"anthropic:fake-agent@{srv.base_url}",
                "--optimizer-model", f"openai-compatible:fake-opt@{srv.openai_url}", "--skill", str(seed),
                "--run-id", "desc", "--epochs", "1", "--train-size", "2", "--val-size", "2", "--test-size", "2",
                "--batch-size", "2", "--concurrency", "2", "--train-description",
                "--set", "train.consolidate=false", "--set", "train.demonstrations=false",
                "--set", "train.merge=false", "--set", "train.ablations_per_step=0",
                "--set", "train.max_reflections_per_step=1", "--set", "limits.timeout_s=120",
                # a plumbing test on 2 validation tasks: a gate that can accept 2 wins out of 2
                "--set", "gate.alpha=0.25", "--set", "gate.trigger_weight=0.5"]
        r = run_cli(args, tmp_path, env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert agent.described == 1
    run = tmp_path / "runs" / "desc"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["scores"]["seed"]["val"]["hard"] == 0.0 and summary["scores"]["best"]["val"]["hard"] == 1.0
    best = (run / "best_skill.md").read_text()
    assert f"description: Use this skill {TRIGGER}." in best and RULE in best
    candidates = json.loads((run / "steps" / "0001" / "candidates.json").read_text())
    described = [c for c in candidates if c["origin"] == "description"]
    assert described and described[0]["status"] == "accepted"
    assert described[0]["edits"][0]["part"] == "description"
    rollouts = [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines()]
    by_version = {}
    for x in rollouts:
        by_version.setdefault(x["version"], set()).add(x["skill_used"])
    best_v = summary["versions"]["best"]
    assert by_version[0] == {False} and by_version[best_v] == {True}  # recorded per rollout from the real trace

    shown = run_cli(["runs", "show", "desc"], tmp_path, env)
    assert shown.returncode == 0, shown.stderr
    lines = {ln.split(" [")[0].strip("└── ├│ "): ln for ln in shown.stdout.splitlines() if re.search(r"v\d{3} \[", ln)}
    # the seed: 2 baseline val rollouts and 2 more drawn afresh by the gate (sampled agent), none loaded it
    assert "skill loaded: train 0% (0/2), val 0% (0/4), test 0% (0/2)" in lines["v000"], shown.stdout
    assert "skill loaded: train 100% (2/2), val 100% (2/2), test 100% (2/2)" in lines[f"v{best_v:03d}"], shown.stdout
    assert "v000 0.000 vs" in shown.stdout and f"v{best_v:03d} 1.000" in shown.stdout  # scores, not score + bonus
    assert "edit replace of the description" in shown.stdout

    cmp = run_cli(["compare", "desc:seed", "desc:best", "--json"], tmp_path, env)
    assert cmp.returncode == 0, cmp.stderr
    rates = {(s["label"], s["split"]): s["trigger"] for s in json.loads(cmp.stdout)["scores"]}
    assert rates[("desc:v000", "val")] == {"loaded": 0, "n": 4}
    assert rates[(f"desc:v{best_v:03d}", "test")] == {"loaded": 2, "n": 2}
    table = run_cli(["compare", "desc:seed", "desc:best"], tmp_path, env)
    assert "skill loaded" in table.stdout and "100% (2/2)" in table.stdout and "0% (0/2)" in table.stdout

    page = tmp_path / "desc.html"
    rep = run_cli(["report", "desc", "-o", str(page)], tmp_path, env)
    assert rep.returncode == 0, rep.stderr
    html = page.read_text()
    assert 'class="trigger"' in html and "100% (2/2)" in html and "0% (0/2)" in html
