"""`train.template=learned`: the optimizer writes the reply's shape (optimizer/reply_shape.py),
the teacher is asked it and the worked example opens with it; with `none` the same teacher answers
bare and no example can be made, as the 1.5B did on GSM8K."""

from __future__ import annotations

import json
import re
import threading

import pytest

from tests.fakes.server import FakeModelServer, FakeReply, FakeRequest
from tests.helpers import cli_env, run_cli, write_jsonl
from tests.test_search import run_args, useless_reflection
from tests.test_train_e2e import code_tasks

SHAPE = "Write what you know about the item first, on its own line, then the code."


class ShapeTeacher:
    """The optimizer, asked for the reply's shape, states SHAPE after reading the failed replies
    beside the expected answers (or a scorer-speaking or copying one, by `shape`); as the teacher it
    works first only when its prompt asks for that shape, else it answers bare (no example can show
    a bare answer). The target solves a task only with a worked example in its skill."""

    def __init__(self, shape: str = SHAPE, follows: str = "## Worked example", teacher_solves: bool = True):
        self.shape, self.follows, self.teacher_solves = shape, follows, teacher_solves
        self.lock = threading.Lock()
        self.shape_prompts: list[str] = []
        self.teacher_prompts: list[str] = []

    def __call__(self, req: FakeRequest) -> FakeReply:
        user = req.last_user_text
        if "You improve a skill" in user:
            return useless_reflection()
        if "how to write its reply to tasks of one kind" in user:
            with self.lock:
                self.shape_prompts.append(user)
            shown = re.search(r"Expected answer: (ZETA-\d+)", user).group(1)
            return FakeReply(text=json.dumps({"shape": self.shape.replace("<SHOWN>", shown)}))
        m = re.search(r"item (\d+)", user)
        if req.model == "fake-opt" and m:
            with self.lock:
                self.teacher_prompts.append(user)
            if SHAPE in user:
                answer = f"ZETA-{m.group(1)}" if self.teacher_solves else "unknown"
                return FakeReply(text=f"Item {m.group(1)} has a code.\nAnswer: {answer}")
            return FakeReply(text=f"Answer: ZETA-{m.group(1)}")
        if self.follows in req.system and m:
            return FakeReply(text=f"Answer: ZETA-{m.group(1)}")
        return FakeReply(text="Answer: unknown")


def test_a_shape_cut_by_the_reply_cap_keeps_its_whole_sentences():
    from skillopt.optimizer.reply_shape import whole_sentences

    cut = "Write the steps first. 1. Analyze the given information. 2. Use it to calculate. 3. Verify the"
    assert whole_sentences(cut) == "Write the steps first. 1. Analyze the given information. 2. Use it to calculate."
    assert whole_sentences("Write the steps first.") == "Write the steps first."
    assert whole_sentences("Write the steps first and then") == "Write the steps first and then"


def test_a_shape_keeps_only_the_sentences_that_do_not_restate_the_prompt():
    """What the 1.5B wrote on GSM8K split seed 1, told the reply cap: its first sentence paraphrases the
    prompt's own framing, its last repeats the prompt's "never copy names, numbers or phrases"; only
    the middle one is an instruction of its own. Numbered steps inside a sentence end nothing."""
    from skillopt.optimizer.reply_shape import own_sentences

    written = ("To write a reply to tasks of one kind, ensure it reaches the right answer by including the necessary "
               "steps, checking, or laying out the reply. Always keep the whole reply, including the final answer, "
               "shorter than 320 tokens. Never copy names, numbers, or phrases from the tasks.")
    assert own_sentences(written) == "Always keep the whole reply, including the final answer, shorter than 320 tokens."
    steps = "Write the steps first: 1. Add them. 2. Check the sum. Then give the answer."
    assert own_sentences(steps) == steps
    # the next run's: the same echo with the verb's form changed
    assert own_sentences("Add the parts first. Always avoid copying names, numbers, or phrases from the tasks.") == \
        "Add the parts first."


def _run(tmp_path, script, name: str, template: str, *more: str):
    data = write_jsonl(tmp_path / "codes.jsonl", code_tasks(16))
    with FakeModelServer(script) as srv:
        r = run_cli(run_args(data, srv.openai_url, name, "--set", "train.consolidate=false", "--set",
                             "train.rules_per_step=0", "--set", f"train.template={template}", *more, epochs=1),
                    tmp_path, cli_env(tmp_path))
    assert r.returncode == 0, r.stderr
    run = tmp_path / "runs" / name
    return run, json.loads((run / "steps" / "0001" / "candidates.json").read_text())


def test_the_shape_the_optimizer_writes_is_what_the_teacher_is_asked_and_the_example_opens_with(tmp_path):
    script = ShapeTeacher()
    run, cands = _run(tmp_path, script, "learned", "learned", "--set", "limits.max_tokens=200")
    assert len(script.shape_prompts) == 1  # one call a step
    assert "A reply is cut after 200 tokens (about 150 words)" in script.shape_prompts[0]  # the target's cap
    assert "Expected answer: ZETA-" in script.shape_prompts[0] and "Agent's reply (end): Answer: unknown" in \
        script.shape_prompts[0]
    assert script.teacher_prompts and all(u.endswith(SHAPE) for u in script.teacher_prompts)
    demo = next(c for c in cands if c["origin"] == "demonstration")
    assert demo["status"] == "accepted", demo
    assert demo["edits"][0]["text"].split("\n\n")[1] == f"Reply the way this example does: {SHAPE}"
    assert demo["rationale"].endswith(f"; reply shape written by the optimizer: {SHAPE}")
    notes = json.loads((run / "steps" / "0001" / "reflections.json").read_text())
    assert any(n["analysis"] == f"reply shape written by the optimizer: {SHAPE}" and n["error"] is None
               for n in notes)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["scores"]["best"]["test"]["hard"] == 1.0 and summary["scores"]["seed"]["test"]["hard"] == 0.0


def test_with_the_template_off_the_bare_teacher_gives_no_example(tmp_path):
    script = ShapeTeacher()
    _, cands = _run(tmp_path, script, "none", "none")
    assert not script.shape_prompts and script.teacher_prompts
    assert all(c["origin"] != "demonstration" for c in cands)


@pytest.mark.parametrize("shape, why", [
    ("Make the reply match the expected answer exactly.", "speaks of the expected answers"),
    ("Write the code the way <SHOWN> is written, then stop.", "reference answer"),  # a shown task's answer
])
def test_a_shape_the_agent_cannot_follow_or_that_copies_a_task_is_not_used(tmp_path, shape, why):
    script = ShapeTeacher(shape)
    run, cands = _run(tmp_path, script, "bad", "learned")
    assert script.shape_prompts and script.teacher_prompts
    assert all(shape.split("<")[0] not in u for u in script.teacher_prompts)
    assert all(c["origin"] != "demonstration" for c in cands)  # the teacher, asked neutrally, answered bare
    notes = json.loads((run / "steps" / "0001" / "reflections.json").read_text())
    assert any(why in (n["error"] or "") for n in notes), notes


def test_the_shape_alone_is_a_candidate_the_gate_keeps_when_the_target_follows_it(tmp_path):
    """No worked example (demonstrations off): the optimizer's shape, verified by the teacher on the
    failed train tasks, goes into the skill as its "How to reply" section, and the target that
    follows such an instruction solves the tasks: the gate accepts it and test goes 0 -> 1."""
    script = ShapeTeacher(follows="## How to reply")
    run, cands = _run(tmp_path, script, "shape", "learned", "--set", "train.demonstrations=false")
    assert len(script.shape_prompts) == 1 and script.teacher_prompts
    (shape,) = [c for c in cands if c["origin"] == "shape"]
    assert shape["status"] == "accepted", shape
    assert shape["edits"][0]["text"] == f"## How to reply\n\n{SHAPE}\n"
    solved = shape["edits"][0]["evidence"]
    assert solved and shape["sources"][:len(solved)] == solved  # screened first on the tasks the teacher solved
    assert f"solved {len(solved)} of {len(script.teacher_prompts)} failed train tasks" in shape["rationale"]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["scores"]["best"]["test"]["hard"] == 1.0 and summary["scores"]["seed"]["test"]["hard"] == 0.0
    assert f"## How to reply\n\n{SHAPE}" in (run / "best_skill.md").read_text()


def test_a_shape_the_teacher_cannot_solve_with_is_not_proposed(tmp_path):
    """The self-verification: asked the shape, the teacher solved none of the failed train tasks, so
    the shape is no candidate, and the step's notes say why; `train.shape_edit=false` proposes none
    even when it would verify."""
    script = ShapeTeacher(follows="## How to reply", teacher_solves=False)
    run, cands = _run(tmp_path, script, "unverified", "learned", "--set", "train.demonstrations=false")
    assert script.shape_prompts and script.teacher_prompts
    assert all(c["origin"] != "shape" for c in cands)
    notes = json.loads((run / "steps" / "0001" / "reflections.json").read_text())
    tried = len(script.teacher_prompts)
    assert any(n["error"] == f"shape not proposed: the teacher asked it solved 0 of {tried} failed train tasks"
               and n["analysis"].endswith(f": {SHAPE}") for n in notes), notes  # what was tried is on record
    off = ShapeTeacher(follows="## How to reply")
    _, cands = _run(tmp_path, off, "off", "learned", "--set", "train.demonstrations=false",
                    "--set", "train.shape_edit=false")
    assert not off.teacher_prompts and all(c["origin"] != "shape" for c in cands)
