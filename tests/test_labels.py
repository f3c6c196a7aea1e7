"""A closed answer set (optimizer/facts.py `label_facts`): when the train split's expected answers are a
few labels the data reuses, the optimizer is told them, counted, and a rule may name them (the leakage
check lets a label two shown tasks share stand); a real run where only a reflection shown the counted
labels writes the rule the data hides, and the gate keeps it."""

from __future__ import annotations

import json
import re

import pytest

from skillopt.benchmarks.qa import make_task
from skillopt.edits import Edit
from skillopt.optimizer.facts import label_facts
from skillopt.optimizer.leakage import LeakageCheck
from skillopt.optimizer.types import ScoredRollout
from tests.fakes.server import FakeModelServer, FakeReply, FakeRequest
from tests.helpers import cli_env, run_cli, write_jsonl
from tests.test_search import run_args


def _scored(tid: str, reference: str, answer: str) -> ScoredRollout:
    hard = float(answer.lower() == reference)
    return ScoredRollout(task_id=tid, prompt=f"question {tid}", reference=reference, output=f"Answer: {answer}",
                         hard=hard, soft=hard, feedback="correct" if hard else "wrong", summary="")


def test_a_few_recurring_labels_are_counted_and_answers_that_mostly_differ_are_not():
    rte = [_scored("a", "entailment", "It follows."), _scored("b", "not_entailment", "No relation"),
           _scored("c", "entailment", "entailment"), _scored("d", "entailment", "The premise implies it"),
           _scored("e", "not_entailment", "contradiction")]
    assert label_facts(rte) == [
        "the expected answers of 5 train tasks are a few labels the data reuses: 'entailment' in 3, "
        "'not_entailment' in 2 (a rule may name these labels)",
        "4 of 4 failed answers were none of these labels"]
    assert label_facts([_scored(t, r, "Yes") for t, r in zip("abcd", ["yes", "no", "yes", "no"])])[1] == \
        "0 of 2 failed answers were none of these labels"  # 'Yes' for 'no' is a label: another answer
    trivia = [_scored(t, r, "x") for t, r in zip("abcd", ["Jane Austen", "Nile", "Jane Austen", "1861"])]
    assert label_facts(trivia) == []  # a number among them: not a label set
    assert label_facts([_scored(t, r, "x") for t, r in zip("abcd", ["Paris", "Nile", "Lyon", "Paris"])]) == []
    assert label_facts([_scored(t, r, "x") for t, r in zip("abc", ["yes", "no", "yes"])]) == []  # too few tasks


def test_a_label_two_shown_tasks_share_may_be_named_and_one_tasks_answer_may_not():
    tasks = [make_task("t1", "Premise: A. Hypothesis: B. What is the relation?", ["not_entailment"]),
             make_task("t2", "Premise: C. Hypothesis: D. What is the relation?", ["not_entailment"]),
             make_task("t3", "Premise: E. Hypothesis: F. What is the relation?", ["entailment"]),
             make_task("t4", "Who wrote Emma?", ["Jane Austen"])]
    check = LeakageCheck(tasks, "# Skill\n")
    assert check.check([Edit(op="add", text="Answer with the label not_entailment when it does not follow.")]) == []
    [finding] = check.check([Edit(op="add", text="Answer entailment when it follows.")])
    assert "reference answer 'entailment'" in str(finding)  # one shown task's answer: a copy
    assert check.check([Edit(op="add", text="Name Jane Austen for novels.")])


LABEL_RULE = "Answer with one label only: alpha_link or beta_link."


class HiddenLabels:
    """The target answers with the data's label only when its skill names both labels; the optimizer
    writes that rule only when its reflection prompt shows the labels counted, and otherwise an edit
    that changes nothing."""

    def __init__(self):
        self.prompts: list[str] = []

    def __call__(self, req: FakeRequest) -> FakeReply:
        user = req.last_user_text
        if "You improve a skill" in user:
            self.prompts.append(user)
            counted = ("a few labels the data reuses: 'alpha_link'" in user or
                       "a few labels the data reuses: 'beta_link'" in user) and \
                "are the data's own labels, not one\n  task's answer" in user  # and told it may name them
            text = LABEL_RULE if counted else "Think about how the two sentences relate."
            ids = re.findall(r"FAILED task (pair-\d+)", user)
            return FakeReply(text=json.dumps({"analysis": "labels", "edits": [
                {"op": "add", "anchor": "", "text": text, "rationale": "labels", "evidence": ids}]}))
        if req.model == "fake-opt":
            return FakeReply(text="Answer: unknown")
        m = re.search(r"pair (\d+)", user)
        if m and LABEL_RULE in req.system:
            return FakeReply(text=f"Answer: {'alpha_link' if int(m.group(1)) % 3 else 'beta_link'}")
        return FakeReply(text="Answer: The second sentence is related to the first.")


def _label_run(tmp_path, script, run_id: str, shown: bool, rules: int, batch: int):
    """A one-epoch run on 24 sentence pairs labelled `alpha_link` / `beta_link` (train 8, val 12): one
    reflection, `rules` rules a step, nothing else proposed; the labels counted for the optimizer or not."""
    rows = [{"id": f"pair-{i:02d}", "question": f"How is the second sentence of pair {i} related to the first?",
             "answer": "alpha_link" if i % 3 else "beta_link"} for i in range(24)]
    data = write_jsonl(tmp_path / "pairs.jsonl", rows)
    with FakeModelServer(script) as srv:
        args = run_args(data, srv.openai_url, run_id, "--set", "train.max_reflections_per_step=1",
                        "--set", "train.demonstrations=false", "--set", "train.merge=false",
                        "--set", "train.ablations_per_step=0", "--set", f"train.rules_per_step={rules}",
                        "--set", "train.consolidate=false", "--set", f"train.label_facts={str(shown).lower()}",
                        val=12, train=8, epochs=1)
        args[args.index("--batch-size") + 1] = str(batch)
        return run_cli(args, tmp_path, cli_env(tmp_path))


@pytest.mark.parametrize("shown", [True, False])
def test_a_reflection_shown_the_counted_labels_writes_the_rule_the_data_hides_and_it_is_kept(tmp_path, shown):
    script = HiddenLabels()
    r = _label_run(tmp_path, script, "labels", shown, rules=0, batch=4)  # two steps of 4 over a train split of 8
    assert r.returncode == 0, r.stderr
    run = tmp_path / "runs" / "labels"
    [candidate] = json.loads((run / "steps" / "0001" / "candidates.json").read_text())
    summary = json.loads((run / "summary.json").read_text())["scores"]
    if not shown:  # the ablation switch: the labels are not counted for the optimizer, which learns nothing
        assert "The answers this data takes" not in script.prompts[0]
        assert candidate["edits"][0]["text"] != LABEL_RULE and candidate["status"] != "accepted"
        assert summary["best"]["test"]["hard"] == 0.0
        return
    assert candidate["origin"] == "reflection" and candidate["edits"][0]["text"] == LABEL_RULE
    assert candidate["status"] == "accepted"  # named labels are no leak: the edit reached the gate and won
    assert "The answers this data takes, counted over the train tasks" in script.prompts[0]
    # counted over the whole train split (8 tasks), not the step's batch of 4
    assert "the expected answers of 8 train tasks are a few labels" in script.prompts[0]
    assert len(json.loads((run / "steps" / "0001" / "batch.json").read_text())["tasks"]) == 4
    assert summary["seed"]["test"]["hard"] == 0.0 and summary["best"]["test"]["hard"] == 1.0


def test_code_names_the_label_set_in_a_rule_when_failures_answer_outside_it_and_only_when_asked():
    import asyncio

    from skillopt.optimizer.form import LABEL_ORIGIN, FormRuleProposer
    from skillopt.optimizer.propose import SearchState
    from skillopt.skill import Skill

    seed = Skill.parse("---\nname: s\ndescription: d\n---\n# Solving\n\nDo it.\n")
    scored = [_scored("a", "not_equivalent", "They differ."), _scored("b", "equivalent", "Same meaning"),
              _scored("c", "equivalent", "equivalent"), _scored("d", "not_equivalent", "not equivalent"),
              _scored("e", "equivalent", "not_equivalent")]

    def propose(**kw):
        state = SearchState(step=1, version=0, skill=seed, scored=scored, tasks={}, rejected=[])
        return asyncio.run(FormRuleProposer(**kw).propose(state)).candidates

    [c] = propose(label_rule=True)
    assert c.origin == LABEL_ORIGIN
    # the labels as the data writes them (underscore kept), most frequent first; the evidence is the three
    # failed answers that were no label ("not equivalent" is a phrase, not the label)
    assert "Answer with exactly one of these labels, written exactly as shown: 'equivalent', 'not_equivalent'." \
        in c.edits[0].text
    assert c.sources == ["a", "b", "d"]
    assert propose(label_rule=False) == []  # off by default: the form rules alone find no difference of form here
    tasks = [make_task(t, f"Sentence pair {t}. What is the relation?", [r.reference]) for t, r in zip("abcde", scored)]
    assert LeakageCheck(tasks, "# Skill\n").check(c.edits) == []  # labels two shown tasks share are no leak
    one = [_scored("a", "equivalent", "Same"), *[_scored(t, "equivalent", "equivalent") for t in "bcd"]]
    state = SearchState(step=1, version=0, skill=seed, scored=one, tasks={}, rejected=[])
    assert asyncio.run(FormRuleProposer(label_rule=True).propose(state)).candidates == []  # one failure: no rule
    same = [_scored(t, "equivalent", "They say the same.") for t in "abcdefgh"]
    state = SearchState(step=1, version=0, skill=seed, scored=same, tasks={}, rejected=[])
    # a batch whose tasks all expect one answer is no label set: no rule "answer 'equivalent'" (a constant)
    assert asyncio.run(FormRuleProposer(label_rule=True).propose(state)).candidates == [] and label_facts(same) == []


def test_the_label_set_is_counted_over_the_train_split_when_a_step_holds_one_label():
    """MRPC's steps of 8 often expect one label only (two thirds of its pairs are `equivalent`): counted
    over the step, there was no label set and nothing named `not_equivalent`; counted over the train
    split, which the optimizer may read, the set is whole, code's rule names both labels, and the leakage
    check lets a label the shown tasks hold once (or never) stand."""
    import asyncio

    from skillopt.optimizer.facts import closed_labels
    from skillopt.optimizer.form import FormRuleProposer
    from skillopt.optimizer.propose import SearchState
    from skillopt.skill import Skill

    seed = Skill.parse("---\nname: s\ndescription: d\n---\n# Solving\n\nDo it.\n")
    step = [_scored(t, "equivalent", "They say the same.") for t in "abcdefgh"]
    split = ["equivalent"] * 16 + ["not_equivalent"] * 8
    assert label_facts(step) == []  # the step alone: one answer, no label set
    assert label_facts(step, split) == [
        "the expected answers of 24 train tasks are a few labels the data reuses: 'equivalent' in 16, "
        "'not_equivalent' in 8 (a rule may name these labels)",
        "8 of 8 failed answers were none of these labels"]
    state = SearchState(step=1, version=0, skill=seed, scored=step, tasks={}, rejected=[], answers=split)
    [c] = asyncio.run(FormRuleProposer(label_rule=True).propose(state)).candidates
    assert "written exactly as shown: 'equivalent', 'not_equivalent'." in c.edits[0].text
    # a label the step's tasks hold once is one task's answer to the leakage check, unless it is told the
    # split's label set ('not_equivalent' would pass anyway: its word 'equivalent' is a label the step shares)
    tasks = [make_task(t, f"Sentence pair {t}. What is the relation?", ["same"]) for t in "abcdefg"]
    tasks.append(make_task("h", "Sentence pair h. What is the relation?", ["different"]))
    rule = [Edit(op="add", text="Answer with exactly one of these labels: 'same', 'different'.")]
    assert "reference answer 'different'" in str(LeakageCheck(tasks, "# Skill\n").check(rule)[0])
    assert LeakageCheck(tasks, "# Skill\n", labels=["same", "different"]).check(rule) == []
    # trivia over a whole split: answers that recur now and then are no label set
    trivia = ["Paris", "Paris", "Nile", "Nile", "Rome", "Oslo", "Lima", "Cairo", "Kyiv", "Bern", "Riga", "Doha"]
    assert closed_labels(trivia) == []
    assert closed_labels(["A", "B", "C", "D"] * 6) == [("A", 6), ("B", 6), ("C", 6), ("D", 6)]  # choices are labels


class LabelRules(HiddenLabels):
    """Reflections change nothing; the rules proposer states the label set only when its prompt puts the
    failures in the `no-label` cluster (answers that were none of the data's labels)."""

    def __call__(self, req: FakeRequest) -> FakeReply:
        user = req.last_user_text
        if "You improve a skill" in user:
            return FakeReply(text=json.dumps({"analysis": "-", "edits": [
                {"op": "add", "anchor": "", "text": "Think about how the two sentences relate.", "rationale": "-",
                 "evidence": []}]}))
        if "You keep the rules of a skill" in user:
            self.prompts.append(user)
            # the no-label cluster's question: which of the labels (named) to answer, and when
            asked = "with one of its labels, 'alpha_link' or 'beta_link'" in user and "when\neach one applies" in user
            rule = LABEL_RULE if asked and "was not among the labels counted below" in user else "Read both sentences twice."
            return FakeReply(text=json.dumps({"pattern": "labels", "rule": rule}))
        return super().__call__(req)


@pytest.mark.parametrize("shown", [True, False])
def test_failures_that_answer_none_of_the_labels_are_one_cluster_and_its_rule_names_them(tmp_path, shown):
    script = LabelRules()
    r = _label_run(tmp_path, script, "rules", shown, rules=1, batch=8)
    assert r.returncode == 0, r.stderr
    run = tmp_path / "runs" / "rules"
    [rules] = [c for c in json.loads((run / "steps" / "0001" / "candidates.json").read_text()) if c["origin"] == "rules"]
    best = json.loads((run / "summary.json").read_text())["scores"]["best"]["test"]["hard"]
    if not shown:  # the labels not counted: no such cluster, and the rule written says nothing of them
        assert "not among the labels" not in script.prompts[0] and rules["status"] != "accepted" and best == 0.0
        return
    assert "'alpha_link' in" in script.prompts[0] and "8 of 8 failed answers were none of these labels" in script.prompts[0]
    assert LABEL_RULE in rules["edits"][0]["text"] and rules["status"] == "accepted" and best == 1.0
    # the rule quotes what the agent wrote beside the label it should have been (its start: a sentence)
    assert re.search(r"For example: '(alpha|beta)_link', not 'The second sentence\.\.\.'",
                     rules["edits"][0]["text"])
