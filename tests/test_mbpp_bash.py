"""mbpp-bash: MBPP's plain-valued tasks in bash, each test one call of the solution in the sandbox,
its printed output compared with the expected value."""

from __future__ import annotations

import random
import time

import pytest

import skillopt.benchmarks as bm
from skillopt.benchmarks.base import RolloutOutput
from skillopt.benchmarks.code import (
    BASH,
    MBPP_BASH_IDS,
    bash_calls,
    bash_task_ids,
    extract_code,
    mbpp_bash_tasks,
    reference_code,
)
from skillopt.sandbox import make_sandbox


def fenced(code: str) -> str:
    return f"Here it is:\n\n```bash\n{code}\n```\n\nIt prints the result."


@pytest.fixture(scope="module")
def bench():
    b = bm.get_benchmark("mbpp-bash")
    b.isolate(make_sandbox(True), None)  # bubblewrap, as a run checks code: bash must be there too
    return b


def task(bench, tid: str):
    return next(t for t in bench.tasks("all") if t.id == tid)


def test_registered_with_its_kept_tasks_and_three_calls_each(bench):
    infos = {b.name: b for b in bm.list_benchmarks()}
    assert infos["mbpp-bash"].size == len(MBPP_BASH_IDS) == len(bench.tasks("all")) == 183
    assert all(t.kind == "code" and t.metadata["language"] == "bash" for t in mbpp_bash_tasks())
    assert all(len(t.hidden["steps"]) == 3 for t in mbpp_bash_tasks())
    first = task(bench, "mbpp-bash-11")
    # the first test as a shell transcript, the bash answer line; the reference and the other calls hidden
    assert "```bash\n$ remove_Occ hello l\nheo\n```" in first.prompt
    assert first.prompt.endswith(BASH.answer_line) and "solution.sh" in first.prompt
    for t in mbpp_bash_tasks():
        assert t.hidden["reference"].strip() not in t.prompt
        assert not any(code.split(", ", 1)[1] in t.prompt for code, _ in t.hidden["steps"][1:]
                       if code != t.hidden["steps"][0][0])


async def test_reference_functions_pass_from_the_reply_and_from_solution_sh(bench, tmp_path):
    for i, t in enumerate(random.Random(3).sample(list(bench.tasks("all")), 10)):
        ws = tmp_path / f"ws{i}"
        ws.mkdir()
        bench.prepare(t, ws)
        assert (ws / "solution.sh").read_text() == ""
        score = await bench.score(t, RolloutOutput(text=fenced(reference_code(t))), ws)
        assert (score.hard, score.soft) == (1, 1), (t.id, score.feedback)
    t = task(bench, "mbpp-bash-11")
    (ws / "solution.sh").write_text(reference_code(t))
    score = await bench.score(t, RolloutOutput(text="I wrote solution.sh."), ws)
    assert score.hard == 1 and "(code from solution.sh)" in score.feedback


async def test_a_wrong_function_is_told_what_it_printed_and_what_bash_said(bench, tmp_path):
    t = task(bench, "mbpp-bash-11")  # remove_Occ: first and last occurrence of a character
    wrong = 'remove_Occ() {\n  local s="$1"\n  echo "${s:1:${#s}-2}"\n}'  # right for 2 of the 3 calls
    score = await bench.score(t, RolloutOutput(text=fenced(wrong)), tmp_path)
    assert score.hard == 0 and score.soft == pytest.approx(2 / 3)
    assert "test 1 failed: AssertionError `remove_Occ hello l` printed 'ell', expected 'heo'" in score.feedback
    # a value returned as an exit status prints nothing: the feedback shows it
    returned = 'remove_Occ() {\n  return 0\n}'
    assert "printed '', expected 'heo'" in (await bench.score(t, RolloutOutput(text=fenced(returned)), tmp_path)).feedback
    broken = await bench.score(t, RolloutOutput(text=fenced("remove_Occ() {\n  echo $((\n}")), tmp_path)
    assert broken.soft == 0 and "bash said:" in broken.feedback


async def test_numbers_compare_as_numbers_and_booleans_in_either_case(bench, tmp_path):
    woodall = task(bench, "mbpp-bash-20")  # is_woodall 383 -> true, 254 -> false, 200 -> false
    assert [w for _, _, w in bash_calls(["assert is_woodall(383) == True"])] == ["true"]
    capital = 'is_woodall() {\n  if [ "$1" = 383 ]; then echo True; else echo False; fi\n}'
    assert (await bench.score(woodall, RolloutOutput(text=fenced(capital)), tmp_path)).hard == 1
    digit = 'is_woodall() {\n  if [ "$1" = 383 ]; then echo 1; else echo 0; fi\n}'
    assert (await bench.score(woodall, RolloutOutput(text=fenced(digit)), tmp_path)).hard == 0
    numbers = task(bench, "mbpp-bash-14")  # find_Volume 10 8 6 -> 240
    decimal = 'find_Volume() {\n  awk -v l="$1" -v b="$2" -v h="$3" \'BEGIN { printf "%.2f\\n", l*b*h/2 }\'\n}'
    assert (await bench.score(numbers, RolloutOutput(text=fenced(decimal)), tmp_path)).hard == 1


async def test_a_call_that_hangs_fails_alone(bench, tmp_path):
    t = task(bench, "mbpp-bash-11")
    hangs_once = ('remove_Occ() {\n  if [ "$1" = hello ]; then while :; do :; done; fi\n'
                  '  local s="${1/$2/}"\n  local p="${s%"$2"*}"\n  [ "$p" != "$s" ] && s="$p${s##*"$2"}"\n'
                  '  echo "$s"\n}')
    t0 = time.monotonic()
    score = await bench.score(t, RolloutOutput(text=fenced(hangs_once)), tmp_path)
    assert time.monotonic() - t0 < 15
    assert score.soft == pytest.approx(2 / 3) and "`remove_Occ hello l` ran past 5 s" in score.feedback


def test_the_reply_s_bash_block_is_taken_over_others():
    text = "```python\nx = 1\n```\n```bash\nf() { echo 1; }\n```\n```text\nnot code\n```"
    assert extract_code(text, BASH).strip() == "f() { echo 1; }"
    assert extract_code("```sh\ng() { :; }\n```", BASH).strip() == "g() { :; }"


def test_only_plain_valued_tests_become_calls():
    assert bash_calls(['assert f("a b", 2, 1.5) == False']) == [("f", ["a b", "2", "1.5"], "false")]
    for test in ("assert f([1, 2]) == 3", "assert f(1) == (1, 2)", "assert f(x=1) == 2", "assert f(1) != 2",
                 "assert set(f(1)) == {1}"):
        with pytest.raises(ValueError):
            bash_calls([test])


@pytest.mark.slow
def test_the_kept_task_ids_are_the_ones_whose_reference_passes():
    """The fixed id list is what the filter computes on this machine's bash (about 40 s)."""
    assert bash_task_ids() == MBPP_BASH_IDS


def test_a_peer_s_reply_to_a_code_task_is_scored_by_its_checks(bench):
    """GEPA and DSPy beside a code family (perf/suite.py): their replies are scored by the task's
    checks in the sandbox, as ours are, and an answer by its scorer."""
    from perf.peer_job import score_reply

    bash = task(bench, "mbpp-bash-11")
    assert score_reply(bash, fenced(reference_code(bash))).hard == 1
    assert score_reply(bash, fenced("remove_Occ() { echo \"$1\"; }")).hard == 0
    python = next(t for t in bm.get_benchmark("mbpp").tasks("all") if t.id == "mbpp-11")
    assert score_reply(python, f"```python\n{reference_code(python)}\n```").hard == 1
    assert score_reply(python, "I cannot write this.").hard == 0
    qa = bm.get_benchmark("gsm8k").tasks("all")[0]
    assert score_reply(qa, f"Answer: {qa.reference}").hard == 1


async def test_the_rules_optimizer_is_shown_what_the_checks_said_counted(bench, tmp_path):
    """Code tasks have no expected answer to compare, so failures sort by what their checks said, and
    the rules prompt counts it. Measured on mbpp-bash (report split seed 100): 13 of 40 validation
    replies under the seed were a ```bash block holding only `solution.sh`; the optimizer, shown them
    mixed among wrong values, never named it. Here each kind comes from the real checks in the sandbox."""
    from skillopt.optimizer.facts import check_facts, checked_facts
    from skillopt.optimizer.rules import cluster_failures, reply_tail
    from skillopt.optimizer.types import ScoredRollout
    from skillopt.prompts import render

    python = bm.get_benchmark("mbpp")
    python.isolate(make_sandbox(True), None)
    cases = [(bench, "mbpp-bash-11", "```bash\nsolution.sh\n```"),  # the file name alone: nothing defined
             (bench, "mbpp-bash-14", "```bash\nsolution.sh\n```"),
             (bench, "mbpp-bash-11", fenced('remove_Occ() {\n  local s="$1"\n  echo "${s:1:${#s}-2}"\n}')),
             (python, "mbpp-59", "```python\nsolution.py\n```"),
             (python, "mbpp-59", "```python\ndef is_octagonal(n):\n    return n * (3 * n - '2')\n```")]
    scored = []
    for i, (b, tid, reply) in enumerate(cases):
        t = next(x for x in b.tasks("all") if x.id == tid)
        ws = tmp_path / f"ws{i}"
        ws.mkdir()
        b.prepare(t, ws)
        s = await b.score(t, RolloutOutput(text=reply), ws)
        scored.append(ScoredRollout(task_id=f"{tid}/{i}", prompt=t.prompt, reference="", output=reply,
                                    hard=s.hard, soft=s.soft, feedback=s.feedback, summary=""))
    clusters = {c.kind: [r.task_id for r in c.failures] for c in cluster_failures(scored)}
    assert clusters == {"undefined": ["mbpp-bash-11/0", "mbpp-bash-14/1", "mbpp-59/3"],
                        "wrong": ["mbpp-bash-11/2"], "error": ["mbpp-59/4"]}
    undefined = [r for r in scored if r.task_id in clusters["undefined"]]
    facts = check_facts(undefined)
    assert "the shell said: '<the function called>: command not found' in 2 of 3" in facts
    assert "2 of 3 failed replies were this same text: '```bash solution.sh ```'" in facts
    assert "3 of 3 failed replies defined no function at all, and the tests called one" in facts
    assert any(f.startswith("raised: NameError in 1 of 3") for f in facts)
    wrong = check_facts([scored[2]])
    assert wrong == ["values given beside the ones expected: `remove_Occ hello l` printed 'ell', expected 'heo'"]
    assert check_facts([scored[4]])[0].startswith("raised: TypeError in 1 of 1")
    # a reflection's minibatch mixes kinds: they are counted first (a task with a reference has none of this)
    assert checked_facts(scored[:3])[0] == ("the checks found: a function or command that did not exist in 2 of 3, "
                                            "another value in 1 of 3")
    assert checked_facts([scored[0].model_copy(update={"reference": "42"})]) == []
    assert "2 of 3 failed replies defined no function at all, and the tests called one" in checked_facts(scored[:3])
    assert not any("defined no function" in f for f in check_facts([scored[2], scored[4]]))
    prompt = render("rules.md.j2", skill_text="", kind="undefined", failures=undefined, passes=[], tail=reply_tail,
                    rules=[], rejected=[], facts=facts, labels=[], code=True)
    assert "that did not exist where\nthe code ran" in prompt and "were this same text" in prompt
    assert "Expected answer" not in prompt


async def test_one_shell_complaint_about_two_tasks_is_counted_once_with_what_it_was_about(bench, tmp_path):
    """Bash's `$(( ))` does integer arithmetic only: a decimal in it is "syntax error: invalid arithmetic
    operator", whatever the expression (4 of the seed's failures in a development mbpp-bash run, each
    about its own formula, and so never counted together). The place ("environment: line 3:") and the
    expression are no part of the complaint; the count shows the expressions beside it."""
    from skillopt.optimizer.facts import check_facts
    from skillopt.optimizer.types import ScoredRollout

    cases = [("mbpp-bash-14", 'find_Volume() {\n  echo $(( 0.5 * $1 * $2 * $3 ))\n}'),
             ("mbpp-bash-11", 'remove_Occ() {\n  local r=$(( 1.5 * 2 ))\n  echo "$r"\n}')]
    scored = []
    for i, (tid, code) in enumerate(cases):
        t = task(bench, tid)
        ws = tmp_path / f"ws{i}"
        ws.mkdir()
        bench.prepare(t, ws)
        s = await bench.score(t, RolloutOutput(text=fenced(code)), ws)
        assert s.hard == 0 and "invalid arithmetic operator" in s.feedback, s.feedback
        scored.append(ScoredRollout(task_id=tid, prompt=t.prompt, reference="", output=fenced(code), hard=s.hard,
                                    soft=s.soft, feedback=s.feedback, summary=""))
    (said,) = [f for f in check_facts(scored) if f.startswith("the shell said")]
    assert said.startswith("the shell said: '...: syntax error: invalid arithmetic operator' in 2 of 2 (on '0.5 * ")
    assert "'1.5 * 2'" in said and "line" not in said


def test_the_seed_skill_s_code_format_does_not_echo_the_task_s_file_instruction():
    """The seed's protected code format once read "Reply with the complete code in one ```bash block",
    four-word runs of the task's own last paragraph ("Write the complete code in `solution.sh` ... or
    reply with it in one ```bash block"). Under it the 1.5B replied with a block holding only
    `solution.sh` on 18-21 of 60 test tasks (development split seeds 0 and 1,
    perf/results/skill_variants-mbpp-bash.json), and protected text is out of the optimizer's reach."""
    from skillopt.config import PRESETS, resolve_config
    from skillopt.engine.setup import seed_skill
    from skillopt.optimizer.rules import word_grams
    from skillopt.skill import find_protected

    skill = seed_skill(resolve_config(PRESETS["quick"], {"benchmark": "mbpp-bash"}))
    spans, problem = find_protected(skill.body)
    assert problem is None and spans
    protected = " ".join(skill.body[a:b] for a, b in spans)
    assert not word_grams(protected, 4) & word_grams(BASH.answer_line, 4)
    old = "Reply with the complete code in one ```bash block: the function with the name the test calls."
    assert word_grams(old, 4) & word_grams(BASH.answer_line, 4)  # the check sees the old wording's echo


def test_a_reply_holding_only_the_file_name_is_counted_and_a_function_is_not():
    from perf.skill_variants import names_a_file_only

    assert names_a_file_only("```bash\nsolution.sh\n```")
    assert names_a_file_only("```\nsolution.sh\n```\n")
    assert names_a_file_only("```python\nsolution.py\n```")
    assert not names_a_file_only("```\nsolution.txt\n```")  # the names the code tasks say, no other
    assert not names_a_file_only("```bash\nsolution() {\n  echo 1\n}\n```")
    assert not names_a_file_only(fenced("double() { echo $(( $1 * 2 )); }"))
