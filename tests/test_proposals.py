"""Proposal helpers alone: the leakage check, the edit ledger, worked examples, the paired interval."""

from __future__ import annotations

import pytest

from skillopt.benchmarks.qa import make_task
from skillopt.edits import Edit, apply_edits
from skillopt.record import EditLedger
from skillopt.optimizer.demonstrate import demonstration_edit
from skillopt.optimizer.leakage import LeakageCheck
from skillopt.skill import Skill
from skillopt.stats import paired_difference_interval

SKILL = Skill.parse("""---
name: grade-school-math
description: Solve math word problems.
---

# Solving math word problems

Work through the problem, then give the result.

## Answer format
<!-- skillopt:protected -->
End your reply with a last line of the form `Answer: <number>`.
<!-- /skillopt:protected -->
""")

TASKS = [
    make_task("t1", "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
                    "How many clips did Natalia sell altogether?", ["72"]),
    make_task("t2", "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. "
                    "How much did she earn?", ["10"]),
]


@pytest.mark.parametrize("text, leaks", [
    ("Natalia sold clips to 48 of her friends: count them all.", "copies"),  # a run of the task's words
    ("When the total is 72, say 72.", "reference answer '72'"),
    ("Remember the 2 fruits.", None),  # no task holds that quantity
    ("Compute 50 minutes as a fraction of an hour.", "quantity '50 minutes'"),
    ("Write each calculation on its own line before the answer.", None),
    ("End your reply with a line 'Answer: <number>' (the number only, no units).", None),  # the prompts' own boilerplate
    ("Determine Natalia's total first.", "its name 'natalia'"),  # a person only one task names
    ("Yesterday's total comes first.", None),  # capitalized only where a sentence starts: no name
])
def test_leakage_check(text, leaks):
    findings = LeakageCheck(TASKS, SKILL.render()).check([Edit(op="add", text=text)])
    if leaks is None:
        assert findings == []
    else:
        assert findings and leaks in str(findings[0])


def test_a_name_several_tasks_share_or_the_skill_holds_is_no_leak():
    tasks = [make_task(f"t{i}", f"Write a function in Python that returns {i} plus one.", [str(i + 1)]) for i in range(2)]
    assert LeakageCheck(tasks, SKILL.render()).check([Edit(op="add", text="Write plain Python, no classes.")]) == []
    one = [make_task("t", "How many apples did Maria buy?", ["3"])]
    assert LeakageCheck(one, SKILL.render() + "\nAsk Maria.\n").check([Edit(op="add", text="Ask Maria first.")]) == []
    assert LeakageCheck(one, SKILL.render()).check([Edit(op="add", text="Ask Maria first.")])


def test_the_function_one_code_task_asks_for_is_its_name_and_one_they_share_or_the_skill_has_is_not():
    """A reflection on mbpp-bash (development split seed 3) added "function count_Rectangles {" and
    "function compute_Last_Digit() {", the functions of the two train tasks it was shown: no words a
    sentence capitalizes, no run of words, so nothing caught it and the gate spent 29 pairs on it."""
    tail = "\n\nYour code should pass tests like this one:\n```bash\n$ {} 2\n8\n```"
    tasks = [make_task("mbpp-bash-355", "Write a bash function to count the number of rectangles in a circle of "
                                        "radius r." + tail.format("count_Rectangles"), [""]),
             make_task("mbpp-bash-47", "Write a bash function to find the last digit when factorial of a divides "
                                       "factorial of b." + tail.format("compute_Last_Digit"), [""])]
    check = LeakageCheck(tasks, SKILL.render())
    (finding,) = check.check([Edit(op="add", text="function count_Rectangles {")])
    assert finding.task_id == "mbpp-bash-355" and "its name 'count_rectangles'" in str(finding)
    assert "compute_last_digit" in str(check.check([Edit(op="add", text="Call computeLastDigit or compute_Last_Digit.")]))
    assert check.check([Edit(op="add", text="Name the function as the test calls it, in snake_case.")]) == []
    shared = [make_task(f"s{i}", f"Write a function. Use the helper read_input. Case {i}.", [""]) for i in range(2)]
    assert LeakageCheck(shared, SKILL.render()).check([Edit(op="add", text="Call read_input first.")]) == []
    held = LeakageCheck(tasks, SKILL.render() + "\nLike count_Rectangles.\n")
    assert held.check([Edit(op="add", text="As count_Rectangles does.")]) == []
    # a worked example quotes its own task's function by design: exact runs only, no names
    assert LeakageCheck(tasks[1:], SKILL.render(), runs_only=True, own=tasks[:1]).check(
        [Edit(op="add", text="count_Rectangles() { echo 8; }")]) == []


def test_a_rule_that_rewords_one_task_is_a_copy_and_the_wording_tasks_share_is_not():
    """The 1.5B's rule from an MBPP run (report split seed 100): one train task's words with an article
    added and a preposition changed, so no run of six words was left and it went to the gate, which
    rejected it. Runs of five content words catch it; what two tasks share is the benchmark's own."""
    tail = "Your code should pass tests like this one: assert {}([1, 15, 51], 3) == 66"
    tasks = [make_task("mbpp-245", "Write a function to find the maximum sum of bi-tonic sub-sequence for the given "
                                   "array. " + tail.format("max_sum"), ["x"]),
             make_task("mbpp-60", "Write a function to find the maximum length of the subsequence with difference "
                                  "between adjacent elements for the given array. " + tail.format("max_len_sub"), ["y"])]
    check = LeakageCheck(tasks, SKILL.render())
    reworded = "The function should find the maximum sum of a bi-tonic sub-sequence in a given array."
    (finding,) = check.check([Edit(op="add", text=reworded)])
    assert finding.task_id == "mbpp-245" and "reworded run 'bi tonic sub sequence given'" in str(finding)
    general = "Write a function to find the answer for the given array, and make it pass tests like this one."
    assert check.check([Edit(op="add", text=general)]) == []  # the two tasks' shared wording
    example = Edit(op="add", text=f"Task: {tasks[0].prompt}", evidence=["mbpp-245"])  # exact runs only
    assert LeakageCheck(tasks[1:], SKILL.render(), runs_only=True, own=tasks[:1]).check([example]) == []


def test_the_benchmarks_own_wording_a_worked_example_shares_with_one_other_task_is_no_copy():
    """MBPP's prompts all say "Your code should pass tests like this one: assert ...": a worked example
    quoting its own task shares that run with any other task whose function name starts alike, and
    was dropped as a copy of it (every MBPP example, measured). Counting the example's own task when
    telling boilerplate keeps it; a run only the other task has is still a copy."""
    tail = "Your code should pass tests like this one: assert is_{}(5) == 65"
    own = make_task("mbpp-1", f"Write a function to find the nth octagonal number. {tail.format('octagonal')}", ["x"])
    other = make_task("mbpp-2", f"Write a function to check whether a word is a palindrome. {tail.format('pal')}", ["y"])
    example = Edit(op="add", text=f"Task: {own.prompt}\nA reply that solved it: ...", evidence=["mbpp-1"])
    assert LeakageCheck([other], SKILL.render(), runs_only=True, own=[own]).check([example]) == []
    assert LeakageCheck([other], SKILL.render(), runs_only=True).check([example])  # what it did
    copied = Edit(op="add", text=f"{example.text} Also check whether a word is a palindrome first.")
    assert LeakageCheck([other], SKILL.render(), runs_only=True, own=[own]).check([copied])


def test_deletes_never_leak_and_short_answers_in_the_skill_do_not_count():
    check = LeakageCheck([make_task("t", "What is 5 + 5?", ["10"])], SKILL.render() + "\n10 items\n")
    assert check.check([Edit(op="delete", anchor="Answer format")]) == []
    assert check.check([Edit(op="add", text="Group items by 10.")]) == []


def test_the_ledger_blames_single_edits_and_keeps_bundle_edits_for_a_test_alone():
    a, b, c = (Edit(op="add", text=t) for t in ("rule a", "rule b", "rule c"))
    ledger = EditLedger()
    ledger.record([a, b], accepted=False)  # a bundle: neither is blamed
    assert ledger.rejected == [] and [e.text for e in ledger.untested] == ["rule a", "rule b"]
    ledger.record([c], accepted=False)  # alone: blamed
    assert [e.text for e in ledger.rejected] == ["rule c"]
    taken = ledger.take_untested(1)
    assert [e.text for e in taken] == ["rule b"] and [e.text for e in ledger.untested] == ["rule a"]
    ledger.record([a], accepted=True)
    assert ledger.untested == [] and a.key in ledger.accepted


def test_a_worked_example_goes_in_its_own_section_and_is_replaced_by_the_next():
    task = TASKS[0]
    first = apply_edits(SKILL, [demonstration_edit(SKILL, task, "48 / 2 = 24\n48 + 24 = 72\nAnswer: 72")])
    assert first.applied and "## Worked example" in first.skill.body and "48 + 24 = 72" in first.skill.body
    assert first.skill.body.index("<!-- skillopt:protected -->") > 0
    second = apply_edits(first.skill, [demonstration_edit(first.skill, TASKS[1], "12 * 50 / 60 = 10\nAnswer: 10")])
    assert second.applied and second.skill.body.count("## Worked example") == 1
    assert "48 + 24" not in second.skill.body and "12 * 50 / 60" in second.skill.body


def test_agresti_min_paired_interval_matches_hand_computation():
    # 7 tasks only B solved, none only A, n = 60: cells + 1/2 -> (7.5 - 0.5) / 62 +- 1.96 * sqrt(8 - 49/62) / 62
    ci = paired_difference_interval([0.0] * 60, [1.0] * 7 + [0.0] * 53)
    assert ci.method == "agresti-min" and ci.mean == pytest.approx(7 / 60)
    assert ci.lo == pytest.approx(7 / 62 - 1.959964 * (8 - 49 / 62) ** 0.5 / 62, abs=1e-6)
    tie = paired_difference_interval([1.0, 0.0] * 20, [1.0, 0.0] * 20)
    assert -0.05 < tie.lo < 0 < tie.hi < 0.05  # identical outcomes: narrow, but not a point
