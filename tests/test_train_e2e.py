"""End to end through the real CLI against the scripted fake server (chat harness).

The fake target answers correctly only when its system prompt holds the rule; the fake
optimizer first proposes a useless edit, then, once that was rejected and it has seen the
failures, the rule. The run must reject the first, accept the second, and report the gain.
"""

from __future__ import annotations

import json
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path


from skillopt.skill import Skill
from tests.fakes.server import FakeModelServer, FakeReply, FakeRequest
from tests.helpers import cli_env, run_cli, write_jsonl

RULE = "Secret codes are ZETA- followed by the item number."
USELESS = "Be concise and polite."


def code_tasks(n: int) -> list[dict]:
    return [{"id": f"item-{i:02d}", "question": f"What is the secret code of item {i}?", "answer": f"ZETA-{i}"}
            for i in range(n)]


class Scripted:
    """Target + optimizer behaviour, with counters of answered calls."""

    def __init__(self, hang_after_target_calls: int | None = None):
        self.lock = threading.Lock()
        self.target_calls: list[tuple[str, str]] = []
        self.optimizer_calls: list[str] = []
        self.hang_after = hang_after_target_calls
        self.release = threading.Event()
        self.hung = threading.Event()

    def __call__(self, req: FakeRequest) -> FakeReply:
        user = req.last_user_text
        if "You improve a skill" in user:
            return self.optimizer(user, reflect=True, seed=req.body.get("seed"))
        if "Rewrite the skill below" in user:
            return self.optimizer(user, reflect=False)
        if req.model == "fake-opt":  # the optimizer as a teacher (demonstrations): it does not know either
            return FakeReply(text="I do not know the code.\nAnswer: unknown")
        return self.target(req)

    def target(self, req: FakeRequest) -> FakeReply:
        with self.lock:
            if self.hang_after is not None and len(self.target_calls) >= self.hang_after:
                self.hung.set()
                hang = True
            else:
                hang = False
                self.target_calls.append((req.system, req.last_user_text))
        if hang:
            self.release.wait(60)
            return FakeReply(text="Answer: too late")
        m = re.search(r"item (\d+)", req.last_user_text)
        if RULE in req.system and m:
            return FakeReply(text=f"The code follows the rule.\nAnswer: ZETA-{m.group(1)}")
        return FakeReply(text="I do not know the code.\nAnswer: unknown")

    def optimizer(self, prompt: str, reflect: bool, seed: int | None = None) -> FakeReply:
        with self.lock:
            self.optimizer_calls.append(f"{prompt}\x00seed={seed}")  # reflections sampled again differ by seed
        if not reflect:
            body = prompt.split("```markdown", 1)[1].split("```", 1)[0].strip()
            shorter = body.replace("Read the task, reason briefly, then give the final answer.", "Reason briefly.")
            return FakeReply(text=json.dumps({"body": shorter}))
        if USELESS in prompt and "rejected earlier" in prompt and "FAILED task" in prompt:
            edit = {"op": "add", "anchor": "Answer format", "text": RULE, "rationale": "codes follow a pattern",
                    "evidence": re.findall(r"FAILED task (\S+)", prompt)}
        else:
            edit = {"op": "add", "anchor": "", "text": USELESS, "rationale": "style", "evidence": []}
        return FakeReply(text=json.dumps({"analysis": "looked at failures", "edits": [edit]}))


def _run_args(data: Path, url: str, run_id: str, **extra: str) -> list[str]:
    args = ["run", "--benchmark", str(data), "--harness", "chat",
            "--target_model", f"openai-compatible:fake-target@{url}",
            "--optimizer_model", f"openai-compatible:fake-opt@{url}",
            "--run-id", run_id, "--epochs", "2", "--batch-size", "4", "--train-size", "4",
            "--val-size", "8", "--test-size", "4", "--concurrency", "2",
            # the protected check adds a version and rollouts the views below count: tests/test_protected.py
            "--set", "models.retry_base_delay_s=0.01", "--set", "train.check_protected=false"]
    for k, v in extra.items():
        args += [f"--{k.replace('_', '-')}", v]
    return args


def test_two_epoch_run_accepts_the_rule_and_rejects_the_useless_edit(tmp_path):
    data = write_jsonl(tmp_path / "codes.jsonl", code_tasks(16))
    script = Scripted()
    with FakeModelServer(script) as srv:
        r = run_cli(_run_args(data, srv.openai_url, "codes"), cwd=tmp_path, env=cli_env(tmp_path))
    assert r.returncode == 0, r.stderr + r.stdout
    run = tmp_path / "runs" / "codes"
    index = [json.loads(x) for x in (run / "skills" / "index.jsonl").read_text().splitlines()]
    final = {v["version"]: v for v in index}
    statuses = {v: final[v]["status"] for v in final}
    texts = {v: (run / "skills" / f"v{v:03d}.md").read_text() for v in final}
    useless = [v for v in final if USELESS in texts[v] and RULE not in texts[v]]
    ruled = [v for v in final if RULE in texts[v] and final[v]["origin"].startswith("step")]
    assert useless and all(statuses[v] in ("rejected", "screened-out") for v in useless)
    assert ruled and statuses[ruled[0]] == "accepted" and final[ruled[0]]["parent"] == 0
    gate = json.loads((run / "steps" / "0002" / "gate.json").read_text())
    assert gate["accepted"] and gate["wins"] == 8 and gate["incumbent_score"] == 0.0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["scores"]["seed"]["val"]["hard"] == 0.0
    assert summary["scores"]["best"]["val"]["hard"] == 1.0
    assert summary["scores"]["best"]["test"]["hard"] == 1.0 and summary["scores"]["seed"]["test"]["hard"] == 0.0
    assert RULE in (run / "best_skill.md").read_text()
    assert "baseline" in r.stdout and "best" in r.stdout
    # the SQLite index holds every version with its parent and gate evidence
    db = sqlite3.connect(tmp_path / "runs" / "skillopt.db")
    rows = db.execute("SELECT version, parent, status, gate_json FROM skill_versions WHERE run_id='codes'").fetchall()
    assert len(rows) == len(final)
    by_v = {v: (p, s, g) for v, p, s, g in rows}
    assert by_v[ruled[0]][1] == "accepted" and json.loads(by_v[ruled[0]][2])["wins"] == 8
    assert by_v[useless[0]][1] == "screened-out" and by_v[useless[0]][2] is None
    # the useless edit failed its screen on the train tasks it came from: no validation rollout paid for it
    rollouts = [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]
    assert not [r for r in rollouts if r["version"] == useless[0] and r["split"] == "val"]
    step1 = json.loads((run / "steps" / "0001" / "candidates.json").read_text())
    screened = [c for c in step1 if c["status"] == "screened-out"]
    assert screened and screened[0]["screen"]["rollouts"] > 0 and screened[0]["gate"] is None
    # the test split was never shown to the optimizer
    test_ids = {json.loads(line)["task_id"] for line in (run / "rollouts.jsonl").read_text().splitlines()
                if json.loads(line)["split"] == "test"}
    assert test_ids and not any(t in p for t in test_ids for p in script.optimizer_calls)


def test_killed_run_resumes_without_paying_any_rollout_twice(tmp_path):
    data = write_jsonl(tmp_path / "codes.jsonl", code_tasks(16))
    script = Scripted(hang_after_target_calls=9)  # baseline (4) + step-1 batch (4) + 1 into the gate
    env = cli_env(tmp_path)
    with FakeModelServer(script) as srv:
        proc = subprocess.Popen([sys.executable, "-m", "skillopt", *_run_args(data, srv.openai_url, "codes")],
                                cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert script.hung.wait(120), "the run never reached the hanging call"
        time.sleep(0.5)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        script.hang_after = None
        first_calls = list(script.target_calls)
        script.release.set()
        r = run_cli(["run", "--resume", "codes"], cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr + r.stdout
    answered = script.target_calls
    assert len(answered) > len(first_calls)
    assert len(answered) == len(set(answered)), "a target call was paid twice"
    assert len(script.optimizer_calls) == len(set(script.optimizer_calls)), "an optimizer call was paid twice"
    run = tmp_path / "runs" / "codes"
    keys = [json.loads(x)["key"] for x in (run / "rollouts.jsonl").read_text().splitlines()]
    assert len(keys) == len(set(keys)) == len(answered)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["scores"]["best"]["val"]["hard"] == 1.0


def test_budget_stops_cleanly_and_resume_continues(tmp_path):
    data = write_jsonl(tmp_path / "codes.jsonl", code_tasks(16))
    env = cli_env(tmp_path)
    with FakeModelServer(Scripted()) as srv:
        r = run_cli(_run_args(data, srv.openai_url, "codes", max_rollouts="6"), cwd=tmp_path, env=env)
        assert r.returncode == 3, r.stderr  # stopped by a budget: its own exit code
        assert "rollout budget reached" in r.stdout + r.stderr
        assert "skillopt run --resume codes" in r.stdout
        state = json.loads((tmp_path / "runs" / "codes" / "state.json").read_text())
        assert state["status"] == "stopped" and state["meter"]["rollouts"] == 6
        r2 = run_cli(["run", "--resume", "codes", "--max-rollouts", "1000"], cwd=tmp_path, env=env)
    assert r2.returncode == 0, r2.stderr
    assert json.loads((tmp_path / "runs" / "codes" / "summary.json").read_text())["status"] == "finished"


def finished_run(tmp_path: Path, script: Scripted, run_id: str, epochs: str) -> Path:
    """A run of the 16 code tasks against `script`, finished with exit 0: its folder."""
    data = write_jsonl(tmp_path / "codes.jsonl", code_tasks(16))
    with FakeModelServer(script) as srv:
        r = run_cli(_run_args(data, srv.openai_url, run_id, epochs=epochs), cwd=tmp_path, env=cli_env(tmp_path))
    assert r.returncode == 0, r.stderr + r.stdout
    return tmp_path / "runs" / run_id


def test_a_consolidation_that_makes_no_version_says_why_in_the_run_files(tmp_path):
    """A rewrite that changes nothing makes no candidate and nothing to gate; its reason used to reach
    only the progress view, so a finished run (and the suite's row) could not say why an epoch's
    consolidation made no version. metrics.jsonl keeps it, and perf/suite.py reads it from there."""
    from perf.suite import accepted_edits, consolidations

    class SameBody(Scripted):
        def optimizer(self, prompt: str, reflect: bool, seed: int | None = None) -> FakeReply:
            if reflect:
                return super().optimizer(prompt, reflect, seed)
            return FakeReply(text=json.dumps({"body": prompt.split("```markdown", 1)[1].split("```", 1)[0]}))

    run = finished_run(tmp_path, SameBody(), "same", epochs="1")
    assert consolidations(run) == [{"epoch": 1, "decision": "none", "reason": "consolidation changed nothing"}]
    assert not (run / "consolidation").exists()
    assert all(e["origin"] != "consolidation" for e in accepted_edits(run))


def test_a_skill_unchanged_since_its_last_consolidation_is_not_rewritten_again(tmp_path):
    """In 3-epoch MRPC and RTE runs nothing was accepted after epoch 1, and epochs 2 and 3 asked the
    1.5B to rewrite the same skill again (it wrote the same text; the optimizer call was spent each
    time). A skill is consolidated once: a later epoch whose incumbent was already consolidated says
    so in the run's files and makes no optimizer call."""
    from perf.suite import consolidations

    class NothingLearned(Scripted):
        def optimizer(self, prompt: str, reflect: bool, seed: int | None = None) -> FakeReply:
            with self.lock:
                self.optimizer_calls.append(prompt)
            if not reflect:  # the same words: no version to gate
                return FakeReply(text=json.dumps({"body": prompt.split("```markdown", 1)[1].split("```", 1)[0]}))
            return FakeReply(text=json.dumps({"analysis": "style", "edits": [
                {"op": "add", "anchor": "", "text": USELESS, "rationale": "style", "evidence": []}]}))

    script = NothingLearned()
    run = finished_run(tmp_path, script, "again", epochs="3")
    assert sum("Rewrite the skill below" in p for p in script.optimizer_calls) == 1
    unchanged = "the skill (v000) has not changed since it was last consolidated"
    assert consolidations(run) == [{"epoch": 1, "decision": "none", "reason": "consolidation changed nothing"},
                                   {"epoch": 2, "decision": "none", "reason": unchanged},
                                   {"epoch": 3, "decision": "none", "reason": unchanged}]


def test_a_run_whose_validation_split_was_too_small_for_an_edit_says_how_many_pairs_it_needs(tmp_path):
    """On development split seed 2 a second MRPC rule won 4 and lost 0 of the 40 validation pairs and
    was rejected (p = 0.0625): the gate's reason held the hint, but the run's summary said only
    "rejected". A rule that helps 3 of the 8 validation tasks and hurts none ends "exhausted"; the
    summary names it and the pairs it would need, and the final table says so."""
    from skillopt.benchmarks import get_benchmark
    from skillopt.benchmarks.base import SplitSizes

    data = write_jsonl(tmp_path / "codes.jsonl", code_tasks(16))
    bench = get_benchmark(data, SplitSizes(seed=0, train=4, val=8, test=4))
    helped = {t.id for t in bench.tasks("train")} | {t.id for t in bench.tasks("val")[:3]}

    class HelpsFew(Scripted):
        def target(self, req: FakeRequest) -> FakeReply:
            m = re.search(r"item (\d+)", req.last_user_text)
            if RULE in req.system and m and f"item-{int(m.group(1)):02d}" in helped:
                return FakeReply(text=f"Answer: ZETA-{m.group(1)}")
            return FakeReply(text="I do not know the code.\nAnswer: unknown")

    with FakeModelServer(HelpsFew()) as srv:
        r = run_cli(_run_args(data, srv.openai_url, "few"), cwd=tmp_path, env=cli_env(tmp_path))
    assert r.returncode == 0, r.stderr + r.stdout
    summary = json.loads((tmp_path / "runs" / "few" / "summary.json").read_text())
    u = summary["closest_undecided"]
    assert (u["wins"], u["losses"], u["pairs"]) == (3, 0, 8) and u["pairs_needed"] > 8
    assert summary["versions"]["best"] == 0
    assert f"undecided: v{u['version']:03d}" in r.stdout and f"about {u['pairs_needed']} pairs" in r.stdout
    report = run_cli(["report", "few", "-o", str(tmp_path / "few.md")], cwd=tmp_path, env=cli_env(tmp_path))
    assert report.returncode == 0, report.stderr
    assert f"- undecided: v{u['version']:03d}" in (tmp_path / "few.md").read_text()


def test_a_rewrite_that_drops_the_protected_answer_format_still_makes_a_consolidation(tmp_path):
    """The embedded 1.5B, asked to copy the protected passages, dropped the answer-format block in every
    epoch of a 3-epoch RTE run, and every consolidation was discarded. The optimizer now sees a
    placeholder and code puts the passage back: here the rewrite drops placeholder, heading and all,
    and the consolidated version still holds the passage, once, and goes to its gate."""
    from perf.suite import consolidations

    class DropsIt(Scripted):
        def optimizer(self, prompt: str, reflect: bool, seed: int | None = None) -> FakeReply:
            if reflect:
                return super().optimizer(prompt, reflect, seed)
            self.consolidation_prompt = prompt
            return FakeReply(text=json.dumps({"body": "# Solving tasks\n\nReason briefly."}))

    script = DropsIt()
    run = finished_run(tmp_path, script, "drops", epochs="1")
    assert "<<KEEP 1>>" in script.consolidation_prompt and "skillopt:protected" not in script.consolidation_prompt
    [c] = consolidations(run)
    assert c["decision"] in ("accept", "reject"), c
    index = [json.loads(x) for x in (run / "skills" / "index.jsonl").read_text().splitlines()]
    [v] = {v["version"]: v for v in index if v["origin"] == "consolidate epoch 1"}.values()
    body = Skill.parse((run / "skills" / f"v{v['version']:03d}.md").read_text()).body
    seed = Skill.parse((run / "skills" / "v000.md").read_text())
    [passage] = [seed.body[a:b] for a, b in seed.protected_spans()]
    assert body.count(passage) == 1 and body.startswith("# Solving tasks\n\nReason briefly.")


def test_the_placeholder_puts_a_protected_passage_back_where_the_rewrite_left_it():
    from skillopt.optimizer.consolidate import hide_protected, restore_protected

    skill = Skill.parse("---\nname: s\ndescription: d\n---\n# Solving\n\nRead it all, then answer.\n\n## Answer format\n"
                        "<!-- skillopt:protected -->\nEnd with Answer: x\n<!-- /skillopt:protected -->\n\n## Rules\n\n- One.\n")
    shown, passages = hide_protected(skill)
    assert "<<KEEP 1>>" in shown and "protected" not in shown and len(passages) == 1
    kept = restore_protected("# Solving\n\nAnswer.\n\n## Answer format\n<< keep 1 >>\n\n## Rules\n\n- One.", passages, False)
    assert kept == f"# Solving\n\nAnswer.\n\n## Answer format\n{passages[0]}\n\n## Rules\n\n- One.\n"
    copied = restore_protected(f"# Solving\n\n{passages[0]}\n<<KEEP 1>>\n<<KEEP 7>>", passages, False)
    assert copied.count(passages[0]) == 1 and "KEEP" not in copied


def test_each_accepted_version_is_scored_on_test_and_paired_with_the_one_before(tmp_path, monkeypatch):
    """perf/suite.py's 3-epoch rows score every accepted version on test after the run. A version's score
    alone does not say whether its edit helped on the same tasks: each keeps its per-task scores, and the
    README's line pairs it with the version before (the one paired interval the suite uses everywhere)."""
    from perf.readme_suite import accumulation_part
    from perf.suite import versions_on_test

    data = write_jsonl(tmp_path / "codes.jsonl", code_tasks(16))
    with FakeModelServer(Scripted()) as srv:
        r = run_cli(_run_args(data, srv.openai_url, "codes"), cwd=tmp_path, env=cli_env(tmp_path))
        assert r.returncode == 0, r.stderr + r.stdout
        monkeypatch.chdir(tmp_path)
        versions = versions_on_test(tmp_path / "runs" / "codes", tmp_path)
    assert [v["origin"] for v in versions][0] == "seed" and len(versions) >= 2
    assert all("error" not in v and len(v["by_task"]) == v["n"] == 4 for v in versions)
    assert set(versions[0]["by_task"].values()) == {0.0} and set(versions[-1]["by_task"].values()) == {1.0}
    row = {"family": "codes", "split_seed": 0, "arm": "ours", "accumulate": True, "versions_on_test": versions}
    (line,) = [x for x in accumulation_part([row]) if x.startswith("- codes")]
    assert "v0 seed 0.000 -> " in line and "(+1.000 [+0.168, +1.000] *, 4/0 over the version before)" in line
