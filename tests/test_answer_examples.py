"""Train questions shown with the answers the data expects (optimizer/answers.py): which tasks qualify,
the one candidate a step, and a run where that section is what the gate keeps while the optimizer
model writes nothing useful."""

from __future__ import annotations

import asyncio
import json
import re

from skillopt.benchmarks.qa import make_task
from skillopt.optimizer.answers import SECTION, AnswerExamplesProposer, question_of
from skillopt.optimizer.propose import SearchState
from skillopt.optimizer.types import ScoredRollout
from skillopt.skill import Skill
from tests.fakes.server import FakeModelServer, FakeReply, FakeRequest
from tests.helpers import cli_env, run_cli, write_jsonl
from tests.test_search import run_args, useless_reflection

SEED = Skill.parse("---\nname: s\ndescription: d\n---\n# Solving\n\nDo it.\n\n## Answer format\n"
                   "<!-- skillopt:protected -->\nEnd with Answer: x\n<!-- /skillopt:protected -->\n")


def test_a_question_is_shown_without_its_passage_and_answer_line_and_only_for_short_text_answers():
    plain = make_task("a", "Which river runs through Cairo?", ["the Nile"])
    assert question_of(plain) == "Which river runs through Cairo?"
    read = make_task("b", "Who wrote it?", ["Jane Austen"], context="Emma is a novel.\n\nIt was published in 1815.")
    assert question_of(read) == "Who wrote it?"  # the passage is the task's, not the convention
    assert question_of(make_task("c", "How many legs has a cat?", ["4"])) is None  # numeric: an answer alone
    assert question_of(make_task("d", "Which?", ["B"], choices=["x", "y"])) is None  # lettered
    assert question_of(make_task("e", "Quote it.", [" ".join(["word"] * 20)])) is None  # a passage, not a form


def _rollout(task, ok: bool) -> ScoredRollout:
    return ScoredRollout(task_id=task.id, prompt=task.prompt, reference=task.answers[0],
                         output=f"Answer: {'' if ok else 'It is '}{task.answers[0]}", hard=float(ok), soft=float(ok),
                         feedback="", summary="")


def test_failed_questions_come_first_are_screened_on_the_others_and_nothing_is_shown_when_nothing_failed():
    tasks = [make_task(f"t{i}", f"Which is thing {i}?", [f"item {i}"]) for i in range(6)]
    scored = [_rollout(t, ok=i % 2 == 0) for i, t in enumerate(tasks)]
    state = SearchState(step=1, version=0, skill=SEED, scored=scored, tasks={t.id: t for t in tasks})
    (c,) = asyncio.run(AnswerExamplesProposer(count=4).propose(state)).candidates
    # it shows four and is screened on the other two: on its own questions the target copies the answers
    assert c.origin == "answer-examples" and c.edits[0].evidence == ["t1", "t3", "t5", "t0"]
    assert c.sources == ["t2", "t4"]
    text = c.edits[0].text
    assert text.startswith(f"## {SECTION}\n\nWhich is thing 1?\nAnswer: item 1\n\n") and "thing 2" not in text
    assert "End your reply" not in text  # the benchmark's answer-format line is the benchmark's, not the skill's
    passed = SearchState(step=1, version=0, skill=SEED, scored=[_rollout(t, ok=True) for t in tasks],
                         tasks={t.id: t for t in tasks})
    assert asyncio.run(AnswerExamplesProposer().propose(passed)).candidates == []
    four = SearchState(step=1, version=0, skill=SEED, scored=scored[:4], tasks={t.id: t for t in tasks})
    assert asyncio.run(AnswerExamplesProposer(count=4).propose(four)).candidates == []  # nothing else to screen on
    from skillopt.edits import apply_edits

    shown = apply_edits(SEED, [c.edits[0]]).skill
    again = SearchState(step=2, version=1, skill=shown, scored=scored, tasks={t.id: t for t in tasks})
    assert asyncio.run(AnswerExamplesProposer().propose(again)).candidates == []  # shown once


class Wordy:
    """The target answers in a sentence ("It is item 3") unless its skill shows expected answers,
    then bare ("item 3"), which is what the data expects; the optimizer's reflections are useless."""

    def __call__(self, req: FakeRequest) -> FakeReply:
        if req.model == "fake-opt":
            return useless_reflection()
        m = re.search(r"thing number (\d+)", req.last_user_text)
        n = m.group(1) if m else "0"
        return FakeReply(text=f"Answer: item {n}" if f"## {SECTION}" in req.system else f"Answer: It is item {n}")


def test_shown_answers_are_kept_by_the_gate_and_quote_only_their_own_train_tasks(tmp_path):
    """Every seed answer is a sentence around the expected one. The section of train questions with
    their expected answers passes the leakage check (it quotes its own train tasks and no other),
    the screen on the step's other train tasks and the gate, and lifts test from 0 to 1; by default
    (`train.answer_examples=0`) no such candidate is made."""
    rows = [{"id": f"t-{i:02d}", "question": f"Which is thing number {i}?", "answer": f"item {i}"} for i in range(16)]
    data = write_jsonl(tmp_path / "things.jsonl", rows)
    common = ["--set", "train.consolidate=false", "--set", "train.demonstrations=false",
              "--set", "train.rules_per_step=0", "--set", "train.form_rules=false"]
    with FakeModelServer(Wordy()) as srv:
        on = run_cli(run_args(data, srv.openai_url, "shown", *common, "--set", "train.answer_examples=3", epochs=1),
                     tmp_path, cli_env(tmp_path))
        off = run_cli(run_args(data, srv.openai_url, "off", *common, epochs=1), tmp_path, cli_env(tmp_path))
    assert on.returncode == 0, on.stderr
    assert off.returncode == 0, off.stderr
    run = tmp_path / "runs" / "shown"
    cands = json.loads((run / "steps" / "0001" / "candidates.json").read_text())
    shown = next(c for c in cands if c["origin"] == "answer-examples")
    assert shown["status"] == "accepted" and shown["leakage"] == [], shown
    edit = shown["edits"][0]
    numbers = re.findall(r"Which is thing number (\d+)\?\nAnswer: item (\d+)", edit["text"])
    assert len(numbers) == 3 and all(q == a for q, a in numbers)
    train = {r["task_id"] for r in (json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines())
             if r["split"] == "train"}
    assert {f"t-{int(q):02d}" for q, _ in numbers} == set(edit["evidence"]) <= train  # its own train tasks only
    screened = set(shown["screen"]["tasks"])  # on train questions it does not answer
    assert screened and screened <= train and not screened & set(edit["evidence"]), shown["screen"]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["scores"]["seed"]["test"]["hard"] == 0.0 and summary["scores"]["best"]["test"]["hard"] == 1.0
    off_cands = json.loads((tmp_path / "runs" / "off" / "steps" / "0001" / "candidates.json").read_text())
    assert all(c["origin"] != "answer-examples" for c in off_cands)
