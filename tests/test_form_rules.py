"""Rules of answer form read off the expected answers by code (optimizer/form.py): which
difference of form the failures share, the one candidate it makes, and a run where that rule is
the edit the gate keeps while the optimizer model writes nothing useful."""

from __future__ import annotations

import asyncio
import json
import re
import threading

from skillopt.optimizer.form import FORMS, FormRuleProposer, dominant_form, form_difference
from skillopt.optimizer.propose import SearchState
from skillopt.optimizer.rules import rules_in
from skillopt.optimizer.types import ScoredRollout
from skillopt.skill import Skill
from tests.fakes.server import FakeModelServer, FakeReply, FakeRequest
from tests.helpers import cli_env, run_cli, write_jsonl
from tests.test_search import run_args, useless_reflection

SEED = Skill.parse("---\nname: s\ndescription: d\n---\n# Solving\n\nDo it.\n\n## Answer format\n"
                   "<!-- skillopt:protected -->\nEnd with Answer: x\n<!-- /skillopt:protected -->\n")


def _failed(tid: str, answer: str, reference: str) -> ScoredRollout:
    return ScoredRollout(task_id=tid, prompt=f"question {tid}", reference=reference, output=f"Answer: {answer}",
                         hard=0.0, soft=0.0, feedback="wrong", summary="")


def _state(scored: list[ScoredRollout], skill: Skill = SEED, rejected=()) -> SearchState:
    return SearchState(step=1, version=0, skill=skill, scored=scored, tasks={}, rejected=list(rejected))


def test_each_difference_of_form_is_named_and_another_answer_is_none():
    assert form_difference(_failed("a", "Emma is a novel by Jane Austen.", "Jane Austen")) == "adds-words"
    assert form_difference(_failed("b", "Sir Joseph Lister", "Joseph Lister")) == "adds-words"
    assert form_difference(_failed("c", "Lister", "Joseph Lister")) == "partial"
    assert form_difference(_failed("d", "twelve", "12")) == "number-expected"
    assert form_difference(_failed("e", "1861", "the Civil War")) == "words-expected"
    assert form_difference(_failed("f", "Hawaii", "Daniel Inouye")) is None  # another answer: knowledge, not form
    assert form_difference(_failed("g", "", "Daniel Inouye")) is None  # no answer at all
    assert form_difference(_failed("h", "It is Paris", "Lyon | Paris")) == "adds-words"  # any listed alternative


def test_a_reply_cut_before_its_answer_is_no_difference_of_form():
    """Seen on MATH prealgebra: two replies ran past the reply cap in their working, and their last
    lines ("The equation of a horizontal line is \\(") were read as words written for a number, so
    the form rule told the target to answer in digits, which it did already."""
    cut = _failed("a", "", "8").model_copy(update={"output": "1. **Slope of DF:**\n   Since DF is horizontal,\n"
                                                                "   The equation of a horizontal line is \\("})
    assert form_difference(cut) is None
    assert dominant_form([cut, cut.model_copy(update={"task_id": "b"})], min_count=2) is None
    one_line = _failed("c", "", "Jane Austen").model_copy(update={"output": "Emma is a novel by Jane Austen."})
    assert form_difference(one_line) == "adds-words"  # a one-line reply is its own answer


def test_the_most_shared_difference_makes_one_rule_quoting_its_own_failures():
    scored = [_failed("a", "It is Jane Austen", "Jane Austen"), _failed("b", "Sir Joseph Lister", "Joseph Lister"),
              _failed("c", "Lister", "Joseph Lister"), _failed("d", "Hawaii", "Daniel Inouye"),
              ScoredRollout(task_id="p", prompt="q", reference="Nile", output="Answer: Nile", hard=1.0, soft=1.0,
                            feedback="correct", summary="")]
    kind, members = dominant_form([r for r in scored if r.failed], min_count=2)
    assert kind == "adds-words" and [r.task_id for r in members] == ["a", "b"]
    proposal = asyncio.run(FormRuleProposer(examples=2).propose(_state(scored)))
    [c] = proposal.candidates
    assert c.origin == "form-rule" and c.sources == ["a", "b"]
    [edit] = c.edits
    assert edit.evidence == ["a", "b"]
    assert edit.text == (f"## Rules\n\n- {FORMS['adds-words']} For example: 'Jane Austen', not 'It is Jane Austen'; "
                         "'Joseph Lister', not 'Sir Joseph Lister'.")
    assert proposal.reflections[0].analysis.startswith("adds-words: 2 of 4 failed answers")


def test_one_failure_of_a_kind_or_a_rule_already_tried_makes_no_candidate():
    one = [_failed("a", "It is Jane Austen", "Jane Austen"), _failed("d", "Hawaii", "Daniel Inouye")]
    assert asyncio.run(FormRuleProposer().propose(_state(one))).candidates == []
    two = [*one, _failed("b", "Sir Joseph Lister", "Joseph Lister")]
    made = asyncio.run(FormRuleProposer().propose(_state(two))).candidates[0].edits[0]
    assert asyncio.run(FormRuleProposer().propose(_state(two, rejected=[made]))).candidates == []  # turned down
    from skillopt.edits import apply_edits

    has = apply_edits(SEED, [made]).skill
    assert rules_in(has) and asyncio.run(FormRuleProposer().propose(_state(two, skill=has))).candidates == []


class Verbose:
    """The target answers in a sentence ("It is the item 3") unless its skill holds the form rule,
    then bare ("item 3"), which is what the data expects; the optimizer's reflections are useless."""

    def __init__(self):
        self.lock = threading.Lock()
        self.optimizer_calls = 0

    def __call__(self, req: FakeRequest) -> FakeReply:
        if req.model == "fake-opt":
            with self.lock:
                self.optimizer_calls += 1
            return useless_reflection()
        m = re.search(r"thing number (\d+)", req.last_user_text)
        n = m.group(1) if m else "0"
        if FORMS["adds-words"] in req.system:
            return FakeReply(text=f"Answer: item {n}")
        return FakeReply(text=f"Answer: It is the item {n}")


def test_a_form_rule_is_kept_by_the_gate_with_no_useful_optimizer_reply(tmp_path):
    """Every seed answer adds words around the expected one. The form rule (the wording for
    `adds-words`, with two of its own train failures quoted) passes the leakage check, the screen
    and the gate, is recorded as a `form-rule` candidate, and lifts test from 0 to 1;
    `train.form_rules=false` makes no such candidate."""
    rows = [{"id": f"t-{i:02d}", "question": f"Which is thing number {i}?", "answer": f"item {i}"} for i in range(16)]
    data = write_jsonl(tmp_path / "things.jsonl", rows)
    script = Verbose()
    with FakeModelServer(script) as srv:
        on = run_cli(run_args(data, srv.openai_url, "form", "--set", "train.consolidate=false",
                              "--set", "train.demonstrations=false", "--set", "train.rules_per_step=0", epochs=1),
                     tmp_path, cli_env(tmp_path))
        off = run_cli(run_args(data, srv.openai_url, "off", "--set", "train.consolidate=false",
                               "--set", "train.demonstrations=false", "--set", "train.rules_per_step=0",
                               "--set", "train.form_rules=false", epochs=1), tmp_path, cli_env(tmp_path))
    assert on.returncode == 0, on.stderr
    assert off.returncode == 0, off.stderr
    run = tmp_path / "runs" / "form"
    cands = json.loads((run / "steps" / "0001" / "candidates.json").read_text())
    form = next(c for c in cands if c["origin"] == "form-rule")
    assert form["status"] == "accepted", form
    assert form["leakage"] == []
    text = form["edits"][0]["text"]
    quoted = re.fullmatch(rf"## Rules\n\n- {re.escape(FORMS['adds-words'])} For example: (.*)\.", text)
    assert quoted, text
    pairs = re.findall(r"'item (\d+)', not 'It is the item (\d+)'", quoted.group(1))
    assert len(pairs) == 2 and all(a == b for a, b in pairs)
    assert {f"t-{int(a):02d}" for a, _ in pairs} <= set(form["edits"][0]["evidence"])
    summary = json.loads((run / "summary.json").read_text())
    assert summary["scores"]["seed"]["test"]["hard"] == 0.0 and summary["scores"]["best"]["test"]["hard"] == 1.0
    off_cands = json.loads((tmp_path / "runs" / "off" / "steps" / "0001" / "candidates.json").read_text())
    assert all(c["origin"] != "form-rule" for c in off_cands)


def test_a_number_beside_words_that_hold_a_number_is_another_answer_not_another_form():
    assert form_difference(_failed("a", "2008", "By 1965")) is None
    assert form_difference(_failed("b", "19th century", "3000 BC")) is None
    assert form_difference(_failed("c", "2022", "the autumn of 2017")) is None


def test_one_label_written_for_another_is_another_answer_not_a_part_of_it():
    """Seen in epoch 1 of a 3-epoch MRPC run: with the labels learned, the failures left wrote
    'equivalent' where the data expected 'not_equivalent'; read as a part of the whole label, they
    made the rule "Write the answer in full ... For example: 'not_equivalent', not 'equivalent'",
    which the gate spent a decision on. Over a split whose answers are a closed label set, a label
    written for another is no difference of form; a sentence written for a label still is."""
    swapped = [_failed(t, "equivalent", "not_equivalent") for t in "ab"]
    assert form_difference(swapped[0]) == "partial"  # no label set known: it reads as a part
    assert form_difference(swapped[0], ["equivalent", "not_equivalent"]) is None
    split = ["equivalent"] * 16 + ["not_equivalent"] * 8
    state = SearchState(step=1, version=0, skill=SEED, scored=swapped, tasks={}, rejected=[], answers=split)
    assert asyncio.run(FormRuleProposer().propose(state)).candidates == []
    sentences = [_failed(t, "The two sentences are equivalent", "equivalent") for t in "cd"]
    state = SearchState(step=1, version=0, skill=SEED, scored=[*swapped, *sentences], tasks={}, rejected=[],
                        answers=split)
    [c] = asyncio.run(FormRuleProposer().propose(state)).candidates
    assert c.sources == ["c", "d"] and "'equivalent', not 'The two sentences are equivalent'" in c.edits[0].text
