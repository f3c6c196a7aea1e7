"""Rules learned from the scorer's feedback (optimizer/rules.py), the template switch
(optimizer/template.py, `train.template`) and the leakage check on worked examples, through the
real CLI against the scripted fake server."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest

from skillopt.optimizer import template
from skillopt.optimizer.rules import cluster_failures, failure_kind, rules_in
from skillopt.optimizer.types import ScoredRollout
from skillopt.skill import Skill
from tests.fakes.server import FakeModelServer, FakeReply, FakeRequest
from tests.helpers import cli_env, run_cli, write_jsonl
from tests.test_search import run_args, useless_reflection
from tests.test_train_e2e import USELESS, code_tasks

CONVENTION = "Write every code in capital letters with a dash: the letters, a dash, then the number."


def coded(n: int) -> list[dict]:
    """Tasks whose answers follow a convention the question never states: ZETA-<n>."""
    return code_tasks(n)


class RuleLearner:
    """The target writes the code right only with the convention in its skill (without it, it writes
    `zeta <n>`, the expected answer's content in another form); reflections are useless; the
    optimizer, asked for a rule, states the convention when it sees the expected answers."""

    def __init__(self):
        self.lock = threading.Lock()
        self.rule_prompts: list[str] = []

    def __call__(self, req: FakeRequest) -> FakeReply:
        user = req.last_user_text
        if "You improve a skill" in user:
            return useless_reflection()
        if "You keep the rules of a skill" in user:
            with self.lock:
                self.rule_prompts.append(user)
            saw = re.findall(r"Expected answer: (ZETA-\d+)", user)
            rule = CONVENTION if saw else "Answer carefully and check your work."
            return FakeReply(text=json.dumps({"pattern": "codes are capital letters, a dash and a number",
                                              "rule": rule}))
        if req.model == "fake-opt":
            return FakeReply(text="Answer: unknown")
        m = re.search(r"item (\d+)", user)
        if m and CONVENTION in req.system:
            return FakeReply(text=f"Answer: ZETA-{m.group(1)}")
        return FakeReply(text=f"The code is zeta {m.group(1) if m else 0}.\nAnswer: zeta {m.group(1) if m else 0}")


def test_a_rule_learned_from_the_expected_answers_is_gated_and_accepted(tmp_path):
    """The seed skill fails every task in a way the expected answers explain (a convention of form).
    The rules proposer shows the optimizer its failures beside the expected answers and the scorer's
    feedback, clustered as `answer-present`; the rule it writes goes into a "Rules" section as one
    bullet, passes the leakage check (it names no task), the screen and the gate, and is kept."""
    data = write_jsonl(tmp_path / "codes.jsonl", coded(16))
    script = RuleLearner()
    with FakeModelServer(script) as srv:
        r = run_cli(run_args(data, srv.openai_url, "rules", "--set", "train.consolidate=false",
                             "--set", "train.demonstrations=false", epochs=1), tmp_path, cli_env(tmp_path))
    assert r.returncode == 0, r.stderr
    run = tmp_path / "runs" / "rules"
    assert script.rule_prompts, "the rules proposer never asked"
    shown = script.rule_prompts[0]
    assert "Expected answer: ZETA-" in shown and "Scorer: " in shown and "zeta " in shown
    assert "expected answer is somewhere in the agent's reply" in shown  # the answer-present cluster
    assert "what the expected answers have in common" in shown and "writing the code" not in shown  # answers
    cands = json.loads((run / "steps" / "0001" / "candidates.json").read_text())
    rule = next(c for c in cands if c["origin"] == "rules")
    assert rule["status"] == "accepted", rule
    assert rule["rationale"].startswith("answer-present: ")
    text = rule["edits"][0]["text"]  # the rule, then answers of its own train failures, expected beside written
    quoted = re.fullmatch(rf"## Rules\n\n- {re.escape(CONVENTION)} For example: (.*)\.", text)
    assert quoted, text
    pairs = re.findall(r"'ZETA-(\d+)', not 'zeta (\d+)'", quoted.group(1))
    assert 1 <= len(pairs) <= 2 and all(a == b for a, b in pairs), quoted.group(1)
    assert {f"item-{int(a):02d}" for a, _ in pairs} <= set(rule["edits"][0]["evidence"])
    best = Skill.parse((run / "best_skill.md").read_text())
    assert [x.split(" For example: ")[0] for x in rules_in(best)] == [CONVENTION]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["scores"]["best"]["test"]["hard"] == 1.0 and summary["scores"]["seed"]["test"]["hard"] == 0.0


class FirstDrawSpeaksOfTheScorer(RuleLearner):
    """The optimizer's first draw of a rule speaks of the expected answers (no rule the agent can follow);
    a draw with another seed states the convention."""

    def __call__(self, req: FakeRequest) -> FakeReply:
        if "You keep the rules of a skill" in req.last_user_text and not req.body.get("seed"):
            with self.lock:
                self.rule_prompts.append(req.last_user_text)
            return FakeReply(text=json.dumps({"pattern": "-", "rule": "Always give the expected answer exactly."}))
        return super().__call__(req)


def test_a_rule_that_fails_its_check_is_drawn_again_and_both_draws_are_recorded(tmp_path):
    data = write_jsonl(tmp_path / "codes.jsonl", coded(16))
    script = FirstDrawSpeaksOfTheScorer()
    with FakeModelServer(script) as srv:
        r = run_cli(run_args(data, srv.openai_url, "redraw", "--set", "train.consolidate=false",
                             "--set", "train.demonstrations=false", "--set", "train.rules_per_step=1",
                             epochs=1), tmp_path, cli_env(tmp_path))
    assert r.returncode == 0, r.stderr
    step = tmp_path / "runs" / "redraw" / "steps" / "0001"
    [rule] = [c for c in json.loads((step / "candidates.json").read_text()) if c["origin"] == "rules"]
    assert rule["status"] == "accepted" and CONVENTION in rule["edits"][0]["text"]
    # the rules proposer's reflections come last: the refused draw, then the one kept
    drawn = [x for x in json.loads((step / "reflections.json").read_text()) if x["minibatch"] == rule["sources"]][-2:]
    assert [bool(x["error"]) for x in drawn] == [True, False] and drawn[1]["analysis"].startswith("answer-present")
    assert "speaks of the expected answers" in drawn[0]["error"]


def test_a_second_rule_is_a_bullet_added_to_the_rules_section():
    from skillopt.edits import apply_edits
    from skillopt.optimizer.rules import rule_edit

    seed = Skill.parse("---\nname: s\ndescription: d\n---\n# Solving\n\nDo it.\n\n## Answer format\n"
                       "<!-- skillopt:protected -->\nEnd with Answer: x\n<!-- /skillopt:protected -->\n")
    one = apply_edits(seed, [rule_edit(seed, "First rule of the kind.", "why", [])]).skill
    two = apply_edits(one, [rule_edit(one, "Second rule of the kind.", "why", [])]).skill
    assert rules_in(two) == ["First rule of the kind.", "Second rule of the kind."]
    assert two.body.count("## Rules") == 1


def test_a_no_label_rule_quotes_each_label_beside_the_start_of_the_sentence_written_for_it():
    from skillopt.optimizer.rules import with_examples

    fails = [_scored("t0", "Equivalent\nAnswer: The two sentences convey the same information.", "equivalent"),
             _scored("t1", "Answer: They say the same thing.", "equivalent"),  # a label already quoted
             _scored("t2", "The first sentence\nadds a date.", "not_equivalent"),  # states no answer: nothing to quote
             _scored("t3", "Answer: They differ.", "not_equivalent")]
    rule = "Answer 'equivalent' when both sentences say the same thing, else 'not_equivalent'."
    assert with_examples(rule, fails, 2, starts=True) == (
        f"{rule} For example: 'equivalent', not 'The two sentences...'; "
        "'not_equivalent', not 'They differ.'.")
    assert with_examples(rule, fails, 1, starts=True).count(", not '") == 1
    # the same failures outside a no-label cluster: sentences are no difference of form, nothing quoted
    assert with_examples(rule, fails, 2) == rule


def test_a_rules_quoted_answers_are_its_own_evidence_and_its_words_are_checked_in_full():
    from skillopt.benchmarks.base import Task
    from skillopt.engine.candidates import leaks
    from skillopt.optimizer.rules import rule_edit, with_examples
    from skillopt.record import Candidate

    seed = Skill.parse("---\nname: s\ndescription: d\n---\n# Solving\n\nDo it.\n")
    shown = [Task(id=f"t{i}", prompt=f"Which sport is played in the big stadium number {i} of the town?",
                  answers=(a,)) for i, a in enumerate(("soccer", "membrane", "cricket"))]
    fails = [_scored("t0", "Answer: Association soccer", "soccer"), _scored("t1", "Answer: Cell membrane", "membrane"),
             _scored("t2", "Answer: cricket", "cricket"),  # differs in nothing: never quoted
             _scored("t3", "Answer: Texas", "Mexico"),  # another answer altogether, not a form: never quoted
             _scored("t4", "Answer: 30", "40")]  # two numbers are two answers: never quoted
    rule = with_examples("Use the shortest common name.", fails, 3)
    assert rule == "Use the shortest common name. For example: 'soccer', not 'Association soccer'; " \
                   "'membrane', not 'Cell membrane'."
    assert with_examples("Use the shortest common name.", fails, 0) == "Use the shortest common name."  # the switch
    cand = Candidate(id="", step=1, origin="rules", parent=0, edits=[rule_edit(seed, rule, "why", ["t0", "t1"])])
    assert leaks(cand, cand.edits, shown, seed) == []
    # the rule's own words may not carry a train answer, nor its quotes another task's words
    bad_rule = rule_edit(seed, "Cricket is a sport. For example: 'soccer', not 'football'.", "why", ["t0"])
    assert "reference answer" in str(leaks(cand.model_copy(update={"edits": [bad_rule]}), [bad_rule], shown, seed)[0])
    copied = rule_edit(seed, "Use short names. For example: 'the big stadium number 2 of the town'.", "why", ["t0"])
    assert leaks(cand.model_copy(update={"edits": [copied]}), [copied], shown, seed)


def test_a_rule_about_the_expected_answers_is_no_rule_the_agent_can_follow():
    from skillopt.optimizer.rules import speaks_of_the_scorer

    assert speaks_of_the_scorer("The agent should provide a completely different answer than the expected one.")
    assert speaks_of_the_scorer("Match the reference answer exactly.")
    assert not speaks_of_the_scorer("Give the shortest common name. For example: 'soccer', not 'the expected one'.")
    assert not speaks_of_the_scorer("Write the number without units or commas.")


def _scored(tid: str, output: str, reference: str, hard: float = 0.0, feedback: str = "", error=None):
    return ScoredRollout(task_id=tid, prompt="q", reference=reference, output=output, hard=hard, soft=hard,
                         feedback=feedback, summary="", error=error)


def test_failures_cluster_by_what_went_wrong():
    rs = [_scored("a", "The answer is 1,200 dollars\nAnswer: $1200.00", "1200", feedback="expected 1200"),
          _scored("b", "Answer: 17", "18", feedback="expected 18, got 17"),
          _scored("c", "", "5", feedback="empty answer (expected 5)"),
          _scored("d", "Answer: Paris, France", "paris", feedback="expected paris"),
          _scored("e", "Answer: 3", "3", hard=1.0),
          _scored("f", "boom", "4", error="timeout")]
    assert [failure_kind(r) for r in rs[:4]] == ["answer-present", "wrong", "no-answer", "answer-present"]
    clusters = cluster_failures(rs)
    assert [(c.kind, [r.task_id for r in c.failures]) for c in clusters] == [
        ("answer-present", ["a", "d"]), ("no-answer", ["c"]), ("wrong", ["b"])]  # passes and errors apart


def test_one_label_written_for_another_is_its_own_cluster_and_the_optimizer_is_asked_when_each_applies():
    """In 3-epoch MRPC runs, once the label rule was accepted, the failures left wrote one label for
    the other. They were clustered as `wrong` (asked for "the ONE change ... what form or how many
    words the answer takes") or, 'not_equivalent' holding 'equivalent', as `answer-present` (asked to
    "look at how and where the answer is written"), and the 1.5B restated the label rule in five of
    five later rules. With the data's labels known they are `wrong-label`: the question is what in the
    tasks tells the labels apart."""
    from skillopt.prompts import render
    from skillopt.optimizer.rules import reply_tail

    labels = ["equivalent", "not_equivalent"]
    rs = [_scored("a", "Answer: not_equivalent", "equivalent"),
          _scored("b", "The sentences match.\nAnswer: equivalent", "not_equivalent"),
          _scored("c", "Answer: They say the same thing.", "equivalent")]
    assert [failure_kind(r, labels) for r in rs] == ["wrong-label", "wrong-label", "no-label"]
    assert [failure_kind(r) for r in rs[:2]] == ["answer-present", "wrong"]  # without the labels, as before
    prompt = render("rules.md.j2", skill_text="s", kind="wrong-label", failures=rs[:2], passes=[], tail=reply_tail,
                    rules=[], rejected=[], labels=labels, facts=[], code=False)
    assert "The agent knows the labels; it does not know when each one" in prompt
    assert "what the failed tasks have that the solved ones do not" in prompt
    assert "Find the ONE change" not in prompt and "how and where the answer is written" not in prompt


def test_a_sentence_written_where_the_data_wants_a_short_phrase_is_its_own_cluster_and_quoted_by_its_start():
    """SQuAD's spans: the target wrote a sentence about something else where a few words were expected.
    That is no difference of form the quotes could show word by word; what to show is the short
    expected phrase beside the start of the sentence (as for a label)."""
    from skillopt.optimizer.rules import with_examples

    rs = [_scored("s", "Answer: The reputation of Luther was severely damaged.", "caused lasting damage | lasting damage"),
          _scored("c", "Answer: Culture", "cultures"),  # as short as expected: another answer, not a sentence
          _scored("n", "Answer: The war ended after about seven long years", "1763"),  # a number expected
          _scored("p", "Answer: The church reform began in the early 11th century.", "11th century"),  # present
          _scored("t", "Answer: It was made a crime for anyone to give him food.", "arrest")]
    assert [failure_kind(r) for r in rs] == ["long-answer", "wrong", "wrong", "answer-present", "long-answer"]
    long = next(c for c in cluster_failures(rs) if c.kind == "long-answer")
    rule = "Answer with the few words of the passage that answer the question, not a sentence."
    assert with_examples(rule, long.failures, 2, starts=True) == (
        f"{rule} For example: 'caused lasting damage', not 'The reputation of...'; 'arrest', not 'It was made...'.")


class Teaching:
    """Records what the teacher and the reflections were asked; the teacher solves with steps."""

    def __init__(self, copy_other: bool = False):
        self.teacher: list[str] = []
        self.reflect: list[str] = []
        self.copy_other = copy_other

    def __call__(self, req: FakeRequest) -> FakeReply:
        user = req.last_user_text
        if "You improve a skill" in user:
            self.reflect.append(user)
            return useless_reflection()
        if "You keep the rules of a skill" in user:
            return FakeReply(text=json.dumps({"pattern": "none", "rule": USELESS}))
        m = re.search(r"item (\d+)", user)
        if req.model == "fake-opt" and m:
            self.teacher.append(user)
            n = int(m.group(1))
            # a reply that carries the other tasks' questions (some of them train tasks shown in this step)
            other = "".join(f"What is the secret code of item {k}?\n" for k in range(16) if k != n) if self.copy_other else ""
            return FakeReply(text=f"{other}The code is ZETA- and the number.\nAnswer: ZETA-{n}")
        if "## Worked example" in req.system and m:
            return FakeReply(text=f"Answer: ZETA-{m.group(1)}")
        return FakeReply(text="Answer: unknown")


@pytest.mark.parametrize("name", ["none", "working-first"])
def test_the_template_setting_decides_every_fixed_wording(tmp_path, name):
    """`train.template=none`: the teacher is asked the task alone, the worked example opens with a
    neutral line, and no reflection is told to write numbered steps; `working-first` (the wording
    that produced the earlier GSM8K lifts) puts all three back."""
    data = write_jsonl(tmp_path / "codes.jsonl", coded(16))
    script = Teaching()
    tpl = template.template(name)
    with FakeModelServer(script) as srv:
        r = run_cli(run_args(data, srv.openai_url, "t", "--set", "train.consolidate=false",
                             "--set", f"train.template={name}", epochs=1), tmp_path, cli_env(tmp_path))
    assert r.returncode == 0, r.stderr
    assert script.teacher and script.reflect
    steps = name == "working-first"
    assert all((template.WORKING_FIRST.show_work in u) == steps for u in script.teacher)
    assert any(tpl.shape_focus in u for u in script.reflect)
    assert all(("'Step 1: ...'" in u) == steps for u in script.reflect if template.NONE.shape_focus in u
               or template.WORKING_FIRST.shape_focus in u)
    cands = json.loads((tmp_path / "runs" / "t" / "steps" / "0001" / "candidates.json").read_text())
    demo = next(c for c in cands if c["origin"] == "demonstration")
    assert demo["edits"][0]["text"].split("\n\n")[1] == tpl.follow
    assert ("Never give the final answer alone" in (tmp_path / "runs" / "t" / "best_skill.md").read_text()) == steps


def test_a_worked_example_that_copies_another_tasks_text_is_dropped(tmp_path):
    """A worked example may quote its own train task, and nothing else: a teacher reply that
    carries another task's words is dropped by the leakage check before any rollout."""
    data = write_jsonl(tmp_path / "codes.jsonl", coded(16))
    with FakeModelServer(Teaching(copy_other=True)) as srv:
        r = run_cli(run_args(data, srv.openai_url, "leakdemo", "--set", "train.consolidate=false", epochs=1),
                    tmp_path, cli_env(tmp_path))
    assert r.returncode == 0, r.stderr
    cands = json.loads((tmp_path / "runs" / "leakdemo" / "steps" / "0001" / "candidates.json").read_text())
    demo = next(c for c in cands if c["origin"] == "demonstration")
    assert demo["status"] == "leaked" and demo["version"] is None
    assert "copies 'the secret code of item" in demo["leakage"][0]


def test_each_candidate_kind_can_be_turned_off_for_the_ablation(tmp_path):
    """The suite's ablation arms: no reflection (`max_reflections_per_step=0`), no rules
    (`rules_per_step=0`), no worked example: the optimizer is never asked what is off."""
    data = write_jsonl(tmp_path / "codes.jsonl", coded(16))
    script = Teaching()
    with FakeModelServer(script) as srv:
        r = run_cli(run_args(data, srv.openai_url, "abl", "--set", "train.consolidate=false",
                             "--set", "train.max_reflections_per_step=0", "--set", "train.rules_per_step=0",
                             "--set", "train.demonstrations=false", epochs=1), tmp_path, cli_env(tmp_path))
    assert r.returncode == 0, r.stderr
    assert not script.reflect and not script.teacher
    cands = json.loads((tmp_path / "runs" / "abl" / "steps" / "0001" / "candidates.json").read_text())
    assert cands == []


def test_the_facts_shown_to_the_optimizer_count_how_answers_differ():
    from skillopt.optimizer.facts import answer_facts

    rs = [_scored("a", "Answer: Cell membrane", "membrane"), _scored("b", "Answer: Association football", "football"),
          _scored("c", "Answer: Persia", "an elephant"), _scored("d", "Answer: twelve", "12"),
          _scored("e", "no idea", "Mexico")]
    facts = answer_facts(rs)
    assert facts[0].startswith("2 of 5: the expected answer is inside the agent's answer, which adds words "
                               "(e.g. agent 'Cell membrane', expected 'membrane'")
    assert any(f.startswith("1 of 5: a number was expected and the agent wrote words") for f in facts)
    assert any(f.startswith("2 of 5: a different answer altogether") for f in facts)
    assert facts[-1] == "on average the agent's final answers have 1.6 words, the expected ones 1.0"
    # a reply cut in its working states no answer: its last line is not an answer in words
    cut = _scored("f", "1. **Slope:**\n   The equation of a horizontal line is \\(", "8")
    assert answer_facts([cut])[0].startswith("1 of 1: no answer was found in the reply")


def test_a_function_checked_by_its_tests_has_no_expected_answer_to_show():
    """Code tasks (mbpp) have no reference answer: the optimizer was told "the agent's answers are
    empty (0 words), whereas the expected answers are also empty" (measured, mbpp split seed 0). No
    answer fact and no "Expected answer" line for them; the scorer's feedback is what they show."""
    from skillopt.optimizer.facts import answer_facts
    from skillopt.optimizer.rules import reply_tail
    from skillopt.prompts import render

    code = _scored("m", "```python\ndef f(x):\n    return x\n```", "", feedback="assert f(2) == 4 failed")
    assert answer_facts([code]) == []
    assert len(answer_facts([code, _scored("a", "Answer: Cell membrane", "membrane")])) == 2  # one kind + average
    prompt = render("rules.md.j2", skill_text="", kind="wrong", failures=[code], passes=[], tail=reply_tail,
                    rules=[], rejected=[], facts=[], labels=[], code=True)
    assert "Expected answer" not in prompt and "the answer the scorer expected" not in prompt
    assert "Scorer: assert f(2) == 4 failed" in prompt


def test_a_rule_that_parrots_the_instructions_is_refused():
    from skillopt.optimizer.rules import restates_instructions

    assert restates_instructions("Always check what form or how many words the answer takes.")
    assert not restates_instructions("Give the common name of the thing, in one or two words, never its full title.")


def test_one_label_written_for_another_is_never_quoted_as_a_difference_of_form():
    """Seen in a 3-epoch RTE run: once the labels were learned, the one failure left wrote
    'not_entailment' for 'entailment', and the rule quoted "'entailment', not 'not_entailment'": one
    train task's answer, which reads as a convention (they share a word) and lost its gate twice."""
    from skillopt.optimizer.rules import with_examples

    labels = ["entailment", "not_entailment"]
    fails = [_scored("t0", "Answer: not_entailment", "entailment"),
             _scored("t1", "Answer: Not entailment", "entailment"),  # the label, as a label reads normalized
             _scored("t2", "Answer: entailment holds", "entailment")]  # not a label: a difference of form
    rule = "Answer 'not_entailment' when the hypothesis goes beyond the premise."
    assert with_examples(rule, fails, 3, labels=labels) == f"{rule} For example: 'entailment', not 'entailment holds'."
    # without the data's labels the swap looks like words added, and was quoted
    assert "not 'not_entailment'" in with_examples(rule, fails, 3)


def test_a_rule_the_skill_has_or_a_counted_fact_is_refused_and_another_condition_is_not():
    """From the later epochs of a 3-epoch RTE run with the 1.5B: the skill's own rule written again
    (gated: 0 won, 0 lost) and a counted fact's kind given as the rule."""
    from skillopt.optimizer.rules import echoes, repeats

    have = ("The agent should answer 'not_entailment' when the hypothesis and premise do not have a logical "
            "connection or support each other. For example: 'entailment', not 'The hypothesis is...'.")
    assert repeats("- The agent should answer 'not_entailment' when the hypothesis and premise do not have a "
                   "logical connection or support each other.", [have])
    assert repeats("Answer 'not_entailment' when the hypothesis and premise do not have a logical connection "
                   "or support each other.", [f"## Rules\n\n- {have}"])
    assert not repeats("The agent should answer 'not_entailment' when the hypothesis adds a fact the premise "
                       "never states, such as a date or a place.", [have])
    assert not repeats("Write the number without units.", [])
    facts = ["3 of 4: a different answer altogether (no word in common) (e.g. agent 'x', expected 'y')"]
    assert echoes("a different answer altogether (no word in common)", facts)
    assert not echoes("Never give an answer altogether different from the passage's words.", facts)



def test_a_rule_that_rearranges_the_words_of_one_the_skill_has_is_a_repeat_and_one_new_word_is_not():
    """A 3-epoch MRPC run (report split seed 109, 120 validation tasks) accepted the label rule at step 1;
    the 1.5B then restated it four times in other word orders, out of reach of the word triples, and
    the gate spent 182 validation rollouts on them (each lost). Words of logic are a rule's own."""
    from skillopt.optimizer.rules import repeats

    have = ("The agent should answer 'equivalent' when the two sentences provide the same information, and "
            "'not_equivalent' when the information is different. For example: 'equivalent', not 'The relation "
            "between...'.")
    for again in ("If the two sentences provide the same information, then the agent should answer 'equivalent'. "
                  "If the information is different, then the agent should answer 'not_equivalent'. For example, "
                  "'equivalent', not 'The relation between...'.",
                  "When answering 'not_equivalent', make sure the information in the two sentences is different.",
                  "When answering 'equivalent', make sure the two sentences provide the same information, and when "
                  "answering 'not_equivalent', make sure the information is different."):
        assert repeats(again, [have]), again
    # MRPC report seed 111: half of the accepted rule, in other forms of its words ("differ", "structures")
    have_111 = ("The agent should answer 'equivalent' if the sentences are exactly the same in content and structure. "
                "If they are different in content or structure, the agent should answer 'not_equivalent'.")
    for again in ("When the sentences differ in structure or content, the agent should answer 'not_equivalent'.",
                  "When the sentences have different structures or content, the agent should answer 'not_equivalent'."):
        assert repeats(again, [have_111]), again
    assert not repeats("When the sentences are about different topics, answer 'not_equivalent'.", [have_111])
    for new in ("Answer 'not_equivalent' when one sentence states something the other does not, such as a "
                "number or a name.",
                "Answer 'not_equivalent' unless the two sentences provide the same information.",
                "Answer 'equivalent' only when the two sentences provide the same information."):
        assert not repeats(new, [have]), new


def test_the_draw_check_refuses_a_repeat_and_a_fact_and_keeps_a_new_condition():
    from skillopt.optimizer.rules import Ask, Cluster, refusal

    have = "The agent should answer 'not_entailment' when the hypothesis and premise do not have a logical connection."
    fact = "1 of 1: a different answer altogether (no word in common) (e.g. agent 'x', expected 'y')"
    ask = Ask("prompt", Cluster("wrong", ()), (), ("entailment", "not_entailment"), (fact,), (have,))
    assert "repeats one the skill has" in refusal(have, ask)
    assert "a counted fact" in refusal("a different answer altogether (no word in common)", ask)
    assert refusal("Answer 'not_entailment' when the hypothesis names a date the premise never gives.", ask) is None


def _sentences(tid: str, first: str, reply: str, reference: str) -> ScoredRollout:
    """`_scored` with an MRPC-like prompt whose first sentence is `first`."""
    prompt = f"Sentence 1: {first}\nSentence 2: The two agree.\n\nWhat is the relation between the two sentences?"
    return _scored(tid, reply, reference, hard=float(reply.endswith(reference))).model_copy(update={"prompt": prompt})


def test_a_rule_that_names_a_task_it_was_shown_is_refused_and_a_labels_condition_is_not():
    """The rules prompt says a rule that copies names or numbers of its tasks is rejected: the 1.5B
    wrote "such as 'HAINAN PROVINCE'" (MRPC, development split seed 2) and "the word 'Jer'" (MRPC, report
    split seed 110), words of one train task that a new task will not have. Quoted words every shown
    task has ('Sentence 1'), a label, or a lower-case cue word are no name; code quotes its language's
    capitalised words ('True') and is not checked."""
    from skillopt.optimizer.rules import Ask, Cluster, names_a_task, refusal

    labels = ("equivalent", "not_equivalent")
    shown = (_sentences("a", "HAINAN PROVINCE , China is less than 40 miles away .", "Answer: equivalent",
                        "not_equivalent"),
             _sentences("b", "Jeremy 's a good guy , Barber said .", "Answer: equivalent", "not_equivalent"),
             _sentences("c", "Shares did not fall .", "Answer: not_equivalent", "not_equivalent"))
    ask = Ask("prompt", Cluster("wrong-label", shown[:2]), shown[:2], labels, (), (), tuple(r.prompt for r in shown))
    for named, rule in (("HAINAN PROVINCE", "If the first sentence mentions a place, such as 'HAINAN PROVINCE', and "
                                            "the second does not, answer 'not_equivalent'."),
                        ("Jer", "When a sentence has the word 'Jer', answer 'not_equivalent'."),
                        ("40", "Answer 'not_equivalent' when one sentence gives a number, such as '40', the other "
                               "does not.")):
        assert named in refusal(rule, ask) and "a name or number of the tasks" in refusal(rule, ask)
    for rule in ("Answer 'not_equivalent' when one sentence says 'not' and the other does not.",
                 "Answer 'equivalent' only when 'Sentence 1' and 'Sentence 2' state the same facts.",
                 "Answer 'not_equivalent' when one sentence names a place or a number the other does not."):
        assert refusal(rule, ask) is None, rule
    code = (_scored("f", "def is_even(n): return 1", "").model_copy(
        update={"prompt": "Write is_even.\nassert is_even(2) == True"}),)
    rule = "Return 'True' or 'False', never a number."
    assert names_a_task(rule, [code[0].prompt, "Write f.\nassert f(1) == 2"]) == "True"  # a name by its form,
    code_ask = Ask("prompt", Cluster("wrong", code), code, (), (), (), (code[0].prompt,))
    assert refusal(rule, code_ask) is None  # but code is not checked


async def test_a_rejected_worked_example_is_not_shown_to_the_rules_call_as_a_rule_tried():
    """The rules prompt lists the rules tried and rejected, each cut to 200 characters. A rejected
    worked example is a train task, not a rule: listed, its cut ended in "Jer" (its task's "Jeremy"),
    and the 1.5B wrote five rules about "the word 'Jer'" (MRPC, report split seed 110)."""
    from skillopt.edits import Edit
    from skillopt.models import Meter, Models, ProviderEnv
    from skillopt.models.spec import parse_model_spec
    from skillopt.optimizer.propose import SearchState
    from skillopt.optimizer.rules import RuleProposer

    seen: list[str] = []

    def optimizer(req: FakeRequest) -> FakeReply:
        seen.append(req.last_user_text)
        return FakeReply(text=json.dumps({"pattern": "p", "rule": "Answer 'not_equivalent' when one sentence states "
                                                                  "something the other does not."}))

    skill = Skill.parse("---\nname: s\ndescription: d\n---\n\n# S\n\nRead the task.\n")
    failed = [_sentences(t, f"Item {t} was sold .", "Answer: equivalent", "not_equivalent") for t in "abc"]
    rejected = [Edit(op="add", anchor=None, text="## Worked example\n\nReply the way this example does.\n\nTask:\n"
                                                 "Sentence 1: Jeremy 's a good guy , Barber said ."),
                Edit(op="add", anchor="Rules", text="- Answer 'equivalent' when both sentences name one person.")]
    state = SearchState(step=2, version=1, skill=skill, scored=failed, tasks={}, rejected=rejected)
    with FakeModelServer(optimizer) as srv:
        spec = parse_model_spec(f"openai-compatible:opt@{srv.openai_url}")
        got = await RuleProposer(Models(env=ProviderEnv(), meter=Meter()), spec, count=1).propose(state)
    assert len(got.candidates) == 1 and len(seen) == 1
    assert "Answer 'equivalent' when both sentences name one person." in seen[0]  # a rule tried is listed
    assert "Worked example" not in seen[0] and "Jeremy" not in seen[0]
