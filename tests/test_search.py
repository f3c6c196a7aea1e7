"""The search, through the real CLI against the scripted fake server: errors are never scores, a
population of candidates with a screen, a Pareto pool and merges, demonstrations, the leakage check.

Every scenario is deterministic: the fake target answers from the rules its system prompt holds.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import threading
from pathlib import Path

import pytest

from skillopt.optimizer import demonstrate

from tests.fakes.server import FakeModelServer, FakeReply, FakeRequest
from tests.helpers import cli_env, run_cli, write_jsonl
from tests.test_train_e2e import USELESS, Scripted, code_tasks


def run_args(data: Path, url: str, run_id: str, *extra: str, val: int = 8, train: int = 4, epochs: int = 2) -> list[str]:
    return ["run", "--benchmark", str(data), "--harness", "chat",
            "--target_model", f"openai-compatible:fake-target@{url}",
            "--optimizer_model", f"openai-compatible:fake-opt@{url}",
            "--run-id", run_id, "--epochs", str(epochs), "--batch-size", str(train), "--train-size", str(train),
            "--val-size", str(val), "--test-size", "4", "--concurrency", "2",
            # the protected check (engine/protected.py) adds a version and rollouts: tests/test_protected.py
            "--set", "models.retry_base_delay_s=0.01", "--set", "train.check_protected=false", *extra]


def load(run: Path, name: str):
    return [json.loads(x) for x in (run / name).read_text().splitlines()]


def decisions(run: Path) -> list[tuple[str, str, str]]:
    """(step, status, edit texts) of every candidate, in order: what the search decided."""
    out = []
    for path in sorted((run / "steps").glob("*/candidates.json")):
        for c in json.loads(path.read_text()):
            out.append((path.parent.name, c["status"], " | ".join(e["text"] for e in c["edits"])))
    return out


# errors are not scores --------------------------------------------------------------------------------
class Faulty:
    """Wraps a script: about 1 request in 5 fails (503, 429, a reply slower than the client's
    timeout, or a truncated 200 body), chosen by a hash of the request and how often the same
    request was seen, so the same run meets the same faults whatever the timing."""

    def __init__(self, inner, rate: float = 0.2):
        self.inner, self.rate = inner, rate
        self.seen: dict[str, int] = {}
        self.faults = 0
        self.lock = threading.Lock()

    def __call__(self, req: FakeRequest) -> FakeReply:
        body = json.dumps(req.body, sort_keys=True)
        with self.lock:
            n = self.seen.get(body, 0)
            self.seen[body] = n + 1
        h = int(hashlib.sha256(f"{body}#{n}".encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
        if h < self.rate:
            with self.lock:
                self.faults += 1
            kind = int(h / self.rate * 4)
            return [FakeReply(status=503, text="overloaded"), FakeReply(status=429, text="slow down"),
                    FakeReply(text="late", delay_s=1.5), FakeReply(raw='{"id": "x", "choices": [{"mess')][kind]
        return self.inner(req)


def test_a_run_with_20_percent_faults_makes_the_same_decisions(tmp_path):
    data = write_jsonl(tmp_path / "codes.jsonl", code_tasks(16))
    with FakeModelServer(Scripted()) as srv:
        clean = run_cli(run_args(data, srv.openai_url, "clean"), tmp_path, cli_env(tmp_path))
    assert clean.returncode == 0, clean.stderr
    faulty = Faulty(Scripted())
    with FakeModelServer(faulty) as srv:
        r = run_cli(run_args(data, srv.openai_url, "faulty", "--set", "models.retries=0",
                             "--set", "models.timeout_s=1"), tmp_path, cli_env(tmp_path))
    assert r.returncode == 0, r.stderr
    assert faulty.faults >= 5
    runs = tmp_path / "runs"
    assert decisions(runs / "faulty") == decisions(runs / "clean")
    assert (runs / "faulty" / "best_skill.md").read_text() == (runs / "clean" / "best_skill.md").read_text()
    rows = load(runs / "faulty", "rollouts.jsonl")
    errored = [x for x in rows if x["error_kind"] == "infra"]
    assert errored, "some rollout should have run out of retries and been recorded as errored"
    # an errored rollout is not cached as a result: asked for again, it runs again
    keys = {x["key"] for x in rows if x["error_kind"] != "infra"}
    assert any(x["key"] in keys for x in errored)
    # and it is never a score: every score and every decision is the fault-free run's
    summary = json.loads((runs / "faulty" / "summary.json").read_text())
    assert summary["scores"] == json.loads((runs / "clean" / "summary.json").read_text())["scores"]


def test_a_malformed_200_body_is_an_errored_rollout_not_a_crash(tmp_path):
    data = write_jsonl(tmp_path / "codes.jsonl", code_tasks(16))
    calls = {"n": 0}
    lock = threading.Lock()

    def script(req: FakeRequest) -> FakeReply:
        with lock:
            calls["n"] += 1
            n = calls["n"]
        if req.model == "fake-target" and n % 3 == 0:
            return FakeReply(raw='{"id": "chatcmpl-1", "object": "chat.completion", "choices": [{"index": 0, "mes')
        return Scripted()(req)

    with FakeModelServer(script) as srv:
        r = run_cli(run_args(data, srv.openai_url, "bad", "--set", "models.retries=0", epochs=1), tmp_path,
                    cli_env(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    rows = load(tmp_path / "runs" / "bad", "rollouts.jsonl")
    bad = [x for x in rows if x["error_kind"] == "infra"]
    assert bad and all("malformed reply" in x["error"] for x in bad)


def test_a_run_whose_rollouts_all_errored_exits_1_with_one_line(tmp_path):
    data = write_jsonl(tmp_path / "codes.jsonl", code_tasks(16))
    with FakeModelServer(lambda req: FakeReply(status=503, text="down for maintenance")) as srv:
        r = run_cli(run_args(data, srv.openai_url, "down", "--set", "models.retries=0"), tmp_path, cli_env(tmp_path))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    errors = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and "every rollout of the baseline errored" in errors[0] and "503" in errors[0]
    summary = json.loads((tmp_path / "runs" / "down" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["scores"]["seed"]["val"]["errors"] == 8


# the population: screen, Pareto pool, merge -------------------------------------------------------------
ALPHA = "Codes of items below 8 are ALPHA- followed by the item number."
OMEGA = "Codes of items from 8 on are OMEGA- followed by the item number."


class TwoRules:
    """Items 0-7 follow ALPHA, 8-15 OMEGA. The optimizer proposes the ALPHA rule from minibatches of
    low items and the OMEGA rule from high ones: each alone wins only its half of the validation tasks."""

    def __call__(self, req: FakeRequest) -> FakeReply:
        user = req.last_user_text
        if "You improve a skill" in user:
            failed = [int(x) for x in re.findall(r"FAILED task item-(\d+)", user)]
            if not failed:
                return FakeReply(text=json.dumps({"analysis": "none", "edits": [
                    {"op": "add", "anchor": "", "text": USELESS, "rationale": "style", "evidence": []}]}))
            rule = ALPHA if failed[0] < 8 else OMEGA
            return FakeReply(text=json.dumps({"analysis": "pattern", "edits": [
                {"op": "add", "anchor": "Answer format", "text": rule, "rationale": "codes follow a pattern",
                 "evidence": [f"item-{i:02d}" for i in failed]}]}))
        if req.model == "fake-opt":
            return FakeReply(text="Answer: unknown")
        m = re.search(r"item (\d+)", user)
        i = int(m.group(1)) if m else -1
        if (i < 8 and ALPHA in req.system) or (i >= 8 and OMEGA in req.system):
            return FakeReply(text=f"Answer: {'ALPHA' if i < 8 else 'OMEGA'}-{i}")
        return FakeReply(text="Answer: unknown")


def two_family_tasks() -> list[dict]:
    return [{"id": f"item-{i:02d}", "question": f"What is the secret code of item {i}?",
             "answer": f"{'ALPHA' if i < 8 else 'OMEGA'}-{i}"} for i in range(16)]


def test_pool_keeps_candidates_best_on_some_task_and_merge_combines_them(tmp_path):
    # split seed 0: train 10 14 05 01 09 02, validation 03 11 13 07 08 04 (three of each family)
    data = write_jsonl(tmp_path / "two.jsonl", two_family_tasks())
    with FakeModelServer(TwoRules()) as srv:
        r = run_cli(run_args(data, srv.openai_url, "two", "--set", "gate.per_step=2", "--set", "train.minibatch_size=1",
                             "--set", "train.max_reflections_per_step=6", "--set", "train.include_successes=0",
                             "--set", "train.consolidate=false", "--set", "train.demonstrations=false",
                             "--set", "gate.early_stop=false", "--set", "splits.test=0", val=6, train=6, epochs=2),
                    tmp_path, cli_env(tmp_path))
    assert r.returncode == 0, r.stderr
    run = tmp_path / "runs" / "two"
    cands = [c for p in sorted((run / "steps").glob("*/candidates.json")) for c in json.loads(p.read_text())]
    alone = [c for c in cands if c["origin"] == "reflection" and c["gate"]]
    assert {c["edits"][0]["text"] for c in alone} >= {ALPHA, OMEGA}
    assert all(c["status"] == "rejected" for c in alone)  # each wins only some validation tasks
    merged = [c for c in cands if c["origin"] == "merge"]
    assert merged and merged[0]["status"] == "accepted"
    # the merge pairs two pool members: both rejected candidates were kept, being best on some task
    assert sorted(merged[0]["members"]) == sorted(c["version"] for c in alone)[:2]
    state = json.loads((run / "state.json").read_text())
    assert {m["version"] for m in state["pool"]["members"]} == {merged[0]["version"]}  # it dominates both now
    best = (run / "best_skill.md").read_text()
    assert ALPHA in best and OMEGA in best


def useless_reflection() -> FakeReply:
    """The optimizer's reflection: one edit that changes nothing the target does."""
    return FakeReply(text=json.dumps({"analysis": "unclear", "edits": [
        {"op": "add", "anchor": "", "text": USELESS, "rationale": "style", "evidence": []}]}))


OVERFIT = "Codes of the items seen in training are ZETA- followed by the item number."
GENERAL = "Every code is ZETA- followed by the item number."


class TwoPassScreens:
    """Two reflections a step, both of which pass their screen: the first (OVERFIT) only helps the
    train items, the second (GENERAL) every item. The screen cannot tell them apart; validation can."""

    def __init__(self, train_ids: set[str]):
        self.train_ids = train_ids

    def __call__(self, req: FakeRequest) -> FakeReply:
        user = req.last_user_text
        if "You improve a skill" in user:
            rule = GENERAL if "Focus of this proposal: the procedure" in user else OVERFIT
            ids = re.findall(r"FAILED task (item-\d+)", user)
            return FakeReply(text=json.dumps({"analysis": "codes", "edits": [
                {"op": "add", "anchor": "", "text": rule, "rationale": "codes", "evidence": ids}]}))
        if req.model == "fake-opt":
            return FakeReply(text="Answer: unknown")
        m = re.search(r"item (\d+)", user)
        item = f"item-{int(m.group(1)):02d}" if m else ""
        if GENERAL in req.system or (OVERFIT in req.system and item in self.train_ids):
            return FakeReply(text=f"Answer: ZETA-{int(m.group(1))}")
        return FakeReply(text="Answer: unknown")


@pytest.mark.parametrize("per_step", [1, 2])
def test_a_step_gates_its_next_screened_candidate_when_the_first_is_rejected_sharing_alpha(tmp_path, per_step):
    from skillopt.benchmarks import get_benchmark
    from skillopt.benchmarks.base import SplitSizes

    data = write_jsonl(tmp_path / "codes.jsonl", code_tasks(24))
    train = {t.id for t in get_benchmark(str(data), SplitSizes(train=4, val=12, test=4)).tasks("train")}
    with FakeModelServer(TwoPassScreens(train)) as srv:
        r = run_cli(run_args(data, srv.openai_url, "two", "--set", f"gate.per_step={per_step}",
                             "--set", "train.max_reflections_per_step=2", "--set", "train.include_successes=0",
                             "--set", "train.demonstrations=false", "--set", "train.merge=false",
                             "--set", "train.ablations_per_step=0", "--set", "train.rules_per_step=0",
                             "--set", "train.form_rules=false", "--set", "train.consolidate=false",
                             val=12, train=4, epochs=1), tmp_path, cli_env(tmp_path))
    assert r.returncode == 0, r.stderr
    run = tmp_path / "runs" / "two"
    cands = {c["edits"][0]["text"]: c for c in json.loads((run / "steps" / "0001" / "candidates.json").read_text())}
    assert cands[OVERFIT]["screen"]["candidate"] == [1.0] * 4 == cands[GENERAL]["screen"]["candidate"]
    assert cands[OVERFIT]["status"] == "rejected"  # gated first (the first proposed), no better on validation
    if per_step == 1:  # the screen passed GENERAL too, but the step gates one candidate: nothing is learned
        assert cands[GENERAL]["status"] == "not-gated"
        assert GENERAL not in (run / "best_skill.md").read_text()
        assert cands[OVERFIT]["gate"]["alpha"] == 0.05
    else:  # the next screened candidate is gated, each at half the step's alpha
        assert cands[GENERAL]["status"] == "accepted"
        assert GENERAL in (run / "best_skill.md").read_text()
        assert cands[OVERFIT]["gate"]["alpha"] == cands[GENERAL]["gate"]["alpha"] == 0.025


# demonstrations ---------------------------------------------------------------------------------------
def test_demonstration_from_a_train_task_solved_by_the_teacher(tmp_path):
    """The target answers only with a worked example in its skill; the reflection proposes nothing
    useful. The optimizer, as a teacher, solves a failed train task (checked by the scorer), and the
    example it makes is screened, gated and accepted. Of the teacher's correct replies, the shortest
    is the example (the target copies its length); a wrong reply is never used, however short."""
    data = write_jsonl(tmp_path / "codes.jsonl", code_tasks(16))
    taught: dict[str, str] = {}  # task id -> the teacher's reply

    def script(req: FakeRequest) -> FakeReply:
        user = req.last_user_text
        if "You improve a skill" in user:
            return useless_reflection()
        m = re.search(r"item (\d+)", user)
        if req.model == "fake-opt" and m:  # the teacher knows the pattern, more or less wordily
            n = int(m.group(1))
            if n % 4 == 0:
                reply = f"Answer: ZETA-{n + 1}"  # wrong, and the shortest
            else:
                reply = "The code is ZETA- and the number.\n" * (20 - n) + f"Answer: ZETA-{n}"  # later items: less said
            taught[f"item-{n:02d}"] = reply
            return FakeReply(text=reply)
        if "## Worked example" in req.system and m:
            return FakeReply(text=f"Answer: ZETA-{m.group(1)}")
        return FakeReply(text="Answer: unknown")

    with FakeModelServer(script) as srv:
        r = run_cli(run_args(data, srv.openai_url, "demo", "--set", "train.consolidate=false", epochs=1),
                    tmp_path, cli_env(tmp_path))
    assert r.returncode == 0, r.stderr
    run = tmp_path / "runs" / "demo"
    cands = json.loads((run / "steps" / "0001" / "candidates.json").read_text())
    demo = next(c for c in cands if c["origin"] == "demonstration")
    assert demo["status"] == "accepted"
    source = re.search(r"from train task (\S+)", demo["rationale"]).group(1)
    train_ids = set(json.loads((run / "steps" / "0001" / "batch.json").read_text())["tasks"])
    assert source in train_ids  # never a validation or test task
    # every train task failed under the seed: the teacher is asked about as many as it may be
    assert len(taught) == min(demonstrate.ATTEMPTS, len(train_ids)) > 3, taught
    correct = {t: r for t, r in taught.items() if r.endswith(f"Answer: ZETA-{int(t.removeprefix('item-'))}")}
    assert source == min(correct, key=lambda t: len(correct[t])), taught
    best = (run / "best_skill.md").read_text()
    assert "## Worked example" in best and "A reply that solved it" in best
    assert correct[source].strip() in best


@pytest.mark.parametrize("teacher", ["wordier", "terser"])
def test_a_worked_example_is_the_shortest_correct_reply_that_shows_its_work_whole(tmp_path, teacher):
    """The target solves some train tasks itself: in a few steps, at great length (more than an
    example may hold), or with the answer alone; the teacher solves the failed ones, more wordily
    than the target's terse replies or more tersely. The example is the shortest correct reply that
    shows its work, the target's or the teacher's, shown whole: a reply too long to show whole is
    never cut down to an example (cut, it loses the answer line it is there to teach)."""
    data = write_jsonl(tmp_path / "codes.jsonl", code_tasks(24))
    replies: dict[str, str] = {}  # task id -> a correct reply that shows its work, the target's or the teacher's
    asked: list[str] = []

    def script(req: FakeRequest) -> FakeReply:
        user = req.last_user_text
        if "You improve a skill" in user:
            return useless_reflection()
        m = re.search(r"item (\d+)", user)
        if not m:
            return FakeReply(text="Answer: unknown")
        n = int(m.group(1))
        tid, kind = f"item-{n:02d}", n % 4
        if req.model == "fake-opt":  # the teacher, asked about a failed task
            asked.append(tid)
            lines = 1 if teacher == "terser" else 12
            replies[tid] = "".join(f"Step {k}: ZETA- then {n}.\n" for k in range(1, lines + 1)) + f"Answer: ZETA-{n}"
            return FakeReply(text=replies[tid])
        if kind == 0:  # right, with far more working than an example may hold
            text = "".join(f"Step {k}: the code is ZETA- and then the item number.\n" for k in range(1, 41))
        elif kind == 1:  # right, a few steps: fewer for later items
            text = "".join(f"Step {k}: the code is ZETA- and the number.\n" for k in range(1, 2 + (24 - n) // 4))
        elif kind == 2:
            return FakeReply(text=f"Answer: ZETA-{n}")  # right, the answer alone
        else:
            return FakeReply(text="Answer: unknown")
        replies[tid] = text + f"Answer: ZETA-{n}"
        return FakeReply(text=replies[tid])

    with FakeModelServer(script) as srv:
        r = run_cli(run_args(data, srv.openai_url, "ex", "--set", "train.consolidate=false", train=8, epochs=1),
                    tmp_path, cli_env(tmp_path))
    assert r.returncode == 0, r.stderr
    run = tmp_path / "runs" / "ex"
    train = json.loads((run / "steps" / "0001" / "batch.json").read_text())["tasks"]
    assert {0, 1, 3} <= {int(t.removeprefix("item-")) % 4 for t in train}, train  # long, terse and failed
    assert asked and set(asked) <= set(train)  # the teacher saw failed train tasks only
    fits = {t: x for t, x in replies.items() if t in train and len(x) <= 1200}  # item-NN with NN % 4 == 0: too long
    cands = json.loads((run / "steps" / "0001" / "candidates.json").read_text())
    demo = next(c for c in cands if c["origin"] == "demonstration")
    source = re.search(r"from train task (\S+)", demo["rationale"]).group(1)
    assert source == min(fits, key=lambda t: len(fits[t])), (source, fits)
    assert ("optimizer model" in demo["rationale"]) == (teacher == "terser")
    example = demo["edits"][0]["text"]
    assert example.rstrip().endswith(replies[source].strip())  # whole, answer line included
    assert "Step 40" not in example


# the leakage check -------------------------------------------------------------------------------------
def refused_run(tmp_path: Path, run_id: str, edit_text, tasks: list[dict] | None = None, op: str = "add",
                anchor: str = "") -> tuple[list[dict], Path, str]:
    """A one-epoch run whose reflections each propose one edit, `edit_text(failed task ids)` (an `op`
    at `anchor`), and whose target never answers right: the step's candidates, the run's folder, and
    its markdown report."""
    data = write_jsonl(tmp_path / f"{run_id}.jsonl", tasks or code_tasks(16))

    def script(req: FakeRequest) -> FakeReply:
        if "You improve a skill" in req.last_user_text:
            failed = re.findall(r"FAILED task (item-\d+)", req.last_user_text)
            return FakeReply(text=json.dumps({"analysis": "from the failures", "edits": [
                {"op": op, "anchor": anchor, "text": edit_text(failed), "rationale": "it failed",
                 "evidence": failed[:1]}]}))
        return FakeReply(text="Answer: unknown")

    with FakeModelServer(script) as srv:
        r = run_cli(run_args(data, srv.openai_url, run_id, "--set", "train.consolidate=false",
                             "--set", "train.demonstrations=false", epochs=1), tmp_path, cli_env(tmp_path))
    assert r.returncode == 0, r.stderr
    run = tmp_path / "runs" / run_id
    cands = json.loads((run / "steps" / "0001" / "candidates.json").read_text())
    report = run_cli(["report", run_id, "--format", "markdown", "-o", "-"], tmp_path, cli_env(tmp_path))
    return cands, run, report.stdout


def test_edits_copying_task_answers_are_rejected_before_any_rollout(tmp_path):
    def copy(failed: list[str]) -> str:
        number = int(failed[0].split("-")[1])
        return f"If asked about item {number}, answer ZETA-{number}."

    cands, run, report = refused_run(tmp_path, "leak", copy)
    assert cands and all(c["status"] == "leaked" and c["version"] is None for c in cands)
    assert "reference answer 'ZETA-" in cands[0]["leakage"][0]
    versions = load(run, "skills/index.jsonl")
    assert {v["version"] for v in versions} == {0}  # nothing was stored or rolled out for them
    assert "leakage check: edit 1 copies its reference answer" in report


def test_a_reflection_that_is_code_alone_is_not_tried(tmp_path):
    """The 1.5B as optimizer, asked for an instruction, often replies with the code or command it saw
    fail (`from math import gcd`, a fenced `export PATH=...`): such an edit is no instruction, and it is
    refused before any rollout is spent on screening it."""
    bare = ["from math import gcd", "```bash\nexport PATH=$PATH:/usr/bin\n```"]
    asked = itertools.count()
    cands, run, report = refused_run(tmp_path, "bare", lambda failed: bare[next(asked) % 2])
    cands = [c for c in cands if c["origin"] == "reflection"]
    assert cands and all(c["status"] == "no-instruction" and c["version"] is None for c in cands)
    assert all("from math import gcd" in c["note"] or "export PATH" in c["note"] for c in cands)
    assert {v["version"] for v in load(run, "skills/index.jsonl")} == {0}  # nothing stored or rolled out
    assert "not tried: a reflection that gave code or a command, no instruction" in report


def test_a_reflection_that_says_what_the_skill_or_the_task_says_is_not_tried(tmp_path):
    """At step 3 of a 3-epoch RTE run the 1.5B's reflection added the seed's own sentence, with the
    description's ending, to the seed: gated, 0 won 1 lost; in a 3-epoch mbpp-bash run one restated
    the task's own "Write the complete code in `solution.sh`" (gated over 26 validation tasks). An
    added passage whose word triples are nearly all in the skill, or in the skill and a task, is
    refused before any rollout; one that says something new is not."""
    again = "Read the task, reason briefly, then give the final answer in the requested format."
    cands, run, report = refused_run(tmp_path, "again", lambda failed: again)
    cands = [c for c in cands if c["origin"] == "reflection"]
    assert cands and all(c["status"] == "duplicate" and c["version"] is None for c in cands)
    assert all("says what the skill or the task already says" in c["note"] for c in cands)
    assert {v["version"] for v in load(run, "skills/index.jsonl")} == {0}  # nothing stored or rolled out
    assert "the edit says what the skill or the task already says" in report

    # the skill's own words in another order (MRPC: the accepted rule restated four times, each gated)
    cands, _, _ = refused_run(tmp_path, "reordered", lambda failed: "Give the final answer briefly, then read "
                                                                  "the task and reason.")
    cands = [c for c in cands if c["origin"] == "reflection"]
    assert cands and all(c["status"] == "duplicate" and c["version"] is None for c in cands)

    new = "Before the answer line, check each name you give against the task's own spelling."
    cands, _, _ = refused_run(tmp_path, "new", lambda failed: new)
    assert any(c["origin"] == "reflection" and c["version"] is not None for c in cands)

    # the task's own instructions, which every task states: no leak (shared wording), and nothing new
    shared = "Write the code in capital letters, with its dash, on the last line."
    tasks = [{**t, "question": f"{t['question']} {shared}"} for t in code_tasks(16)]
    cands, _, _ = refused_run(tmp_path, "task", lambda failed: shared, tasks)
    cands = [c for c in cands if c["origin"] == "reflection"]
    assert cands and all(c["status"] == "duplicate" and not c["leakage"] for c in cands)


@pytest.mark.parametrize("text, tried", [
    ("End your reply with a last line of the form `Answer: <answer>`.", False),  # the protected format again
    ("Read the task twice, reason briefly, then give the final answer.", True),  # the passage it replaces, reworded
    ("Before the answer line, check each name you give against the task's own spelling.", True),
])
def test_a_reflection_that_puts_what_the_skill_says_in_place_of_a_passage_is_not_tried(tmp_path, text, tried):
    """On HumanEval the 1.5B's reflections replaced the seed's one instruction with the protected code
    format, and with the task's own instruction: both reached the screen. A replacement is read against
    the skill without the passage it replaces: one the rest of the skill already says is refused before
    any rollout; a rewording of the replaced passage, or something new, is tried."""
    cands, run, _ = refused_run(tmp_path, "swap", lambda failed: text, op="replace",
                                anchor="Read the task, reason briefly, then give the final answer.")
    cands = [c for c in cands if c["origin"] == "reflection"]
    assert cands
    if tried:
        assert any(c["version"] is not None for c in cands), cands
    else:
        assert all(c["status"] == "duplicate" and c["version"] is None for c in cands), cands
        assert {v["version"] for v in load(run, "skills/index.jsonl")} == {0}


def test_a_reflection_that_repeats_one_rejected_is_not_tried(tmp_path):
    """In a 3-epoch mbpp-bash run the 1.5B's reflection at step 3 was the one screened out at step 2,
    word for word under another anchor, and at step 4 it gave a rule rejected at step 3 as its
    reflection: each cost a screen. An edit whose word triples are nearly all in one edit tried and
    rejected is not tried, wherever it is anchored."""
    first = "Before the answer line, check each name you give against the task's own spelling."
    data = write_jsonl(tmp_path / "codes.jsonl", code_tasks(16))

    def script(req: FakeRequest) -> FakeReply:
        if "You improve a skill" in req.last_user_text:
            failed = re.findall(r"FAILED task (item-\d+)", req.last_user_text)
            again = "own spelling" in req.last_user_text  # the rejected edit is shown: write it again elsewhere
            text, anchor = (first[:-1] + ", every time.", "# Solving tasks") if again else (first, "")
            return FakeReply(text=json.dumps({"analysis": "from the failures", "edits": [
                {"op": "add", "anchor": anchor, "text": text, "rationale": "it failed", "evidence": failed[:1]}]}))
        return FakeReply(text="Answer: unknown")

    with FakeModelServer(script) as srv:
        r = run_cli(run_args(data, srv.openai_url, "again", "--set", "train.consolidate=false",
                             "--set", "train.demonstrations=false", "--set", "train.rules_per_step=0",
                             train=8, epochs=1) + ["--batch-size", "4"], tmp_path, cli_env(tmp_path))
    assert r.returncode == 0, r.stderr
    steps = {step: [c for c in json.loads((tmp_path / "runs" / "again" / "steps" / step / "candidates.json")
                                          .read_text()) if c["origin"] == "reflection"] for step in ("0001", "0002")}
    assert steps["0001"] and all(c["status"] != "duplicate" for c in steps["0001"])
    assert steps["0002"] and all(c["status"] == "duplicate" and c["version"] is None for c in steps["0002"])
    assert all("repeats one tried and rejected" in c["note"] for c in steps["0002"])


@pytest.mark.parametrize("text, bare", [
    ("import cmath", True), ("```mswea_bash_command\npytest\n```\n", True), ("export PATH=$PATH:/usr/bin", True),
    ("`pytest -q`", True), ("def f(x):\n    return x\n", True), ("## Tests\n```\npytest\n```", True),
    ("# Import necessary modules\nimport numpy as np\n\n# Define the encode_list function\nencode_list(data):", True),
    ("Run `python -m pytest -q` after every edit; finish only when it exits 0.", False),
    ("End with 'Answer: <number>'", False), ("- Use the function name the test calls.", False),
    ("cat the file first, then edit it.", False),
    ("Write the file in one command:\n```bash\ncat > solution.py <<'EOF'\nx = 1\nEOF\n```", False)])
def test_code_alone_is_told_from_an_instruction(text, bare):
    from skillopt.engine.candidates import bare_code

    assert bare_code(text) is bare


def test_pareto_pool_keeps_what_is_best_somewhere_and_drops_what_is_dominated():
    from skillopt.edits import Edit
    from skillopt.record import GateDecision, GatePair, ParetoPool

    def decision(v: int, scores: dict[str, tuple[float, float]]) -> GateDecision:
        return GateDecision(candidate=v, incumbent=0, accepted=False, reason="", metric="hard", incumbent_score=0,
                            candidate_score=0, pairs=[GatePair(task_id=t, incumbent=a, candidate=b)
                                                      for t, (a, b) in scores.items()])

    pool = ParetoPool()
    edit = Edit(op="add", text="x")
    pool.add(1, 0, [edit], decision(1, {"a": (0, 1), "b": (0, 0), "c": (1, 1)}))  # best on a
    pool.add(2, 0, [edit], decision(2, {"a": (0, 0), "b": (0, 1), "c": (1, 1)}))  # best on b
    pool.add(3, 0, [edit], decision(3, {"a": (0, 0), "b": (0, 0), "c": (1, 0)}))  # best nowhere
    assert sorted(pool.front()) == [1, 2]
    a, b = pool.complementary()
    assert {a.version, b.version} == {1, 2}
    pool.add(4, 0, [edit], decision(4, {"a": (0, 1), "b": (0, 1), "c": (1, 1)}))  # dominates 1 and 2
    assert pool.front() == [4]
