"""Reflection asks for a reply whose anchors can only be ones the skill has, and agents never see
skillopt's protected-region markers."""

from __future__ import annotations

import json

from skillopt.benchmarks.base import Task
from skillopt.harness.base import Limits
from skillopt.harness.chat import ChatHarness
from skillopt.harness.registry import HarnessContext
from skillopt.harness.workspace import write_skill
from skillopt.models import Meter, Models, ProviderEnv
from skillopt.models.spec import parse_model_spec
from skillopt.optimizer.reflect import anchor_choices, reflect, reply_schema
from skillopt.optimizer.types import ScoredRollout
from skillopt.skill import Skill
from tests.fakes.server import FakeModelServer, FakeReply, FakeRequest

SKILL = Skill.parse("""---
name: math
description: Solve word problems.
---

# Solving

Read the problem twice.
Write each calculation on its own line.

## Answer format
<!-- skillopt:protected -->
End with `Answer: <number>`.
<!-- /skillopt:protected -->
""")

FAILED = ScoredRollout(task_id="t1", prompt="2+2?", reference="4", output="Answer: 5", hard=0, soft=0,
                       feedback="expected 4, got 5", summary="answered 5")


def test_anchor_choices_are_the_end_titles_and_unprotected_lines():
    assert anchor_choices(SKILL) == ["", "Solving", "Answer format", "Read the problem twice.",
                                     "Write each calculation on its own line."]
    # replace / delete: no section holding a protected region (here: both, "Solving" holds "Answer format")
    assert anchor_choices(SKILL, editable=True) == ["Read the problem twice.", "Write each calculation on its own line."]


def test_reply_schema_limits_anchors_per_op_and_edit_count():
    schema = reply_schema(SKILL, 2)
    add, change = schema["$defs"]["ProposedEdit"]["anyOf"]
    assert add["properties"]["op"]["enum"] == ["add"] and add["properties"]["anchor"]["enum"] == anchor_choices(SKILL)
    assert change["properties"]["op"]["enum"] == ["replace", "delete"]
    assert change["properties"]["anchor"]["enum"] == anchor_choices(SKILL, editable=True)
    assert (schema["properties"]["edits"]["minItems"], schema["properties"]["edits"]["maxItems"]) == (1, 2)
    only_protected = Skill.parse("---\nname: x\ndescription: y\n---\n<!-- skillopt:protected -->\nKeep.\n"
                                 "<!-- /skillopt:protected -->\n")
    (only_add,) = reply_schema(only_protected, 1)["$defs"]["ProposedEdit"]["anyOf"]
    assert only_add["properties"]["anchor"]["enum"] == [""]


async def test_reflect_sends_the_narrowed_schema_and_lists_the_anchors():
    seen: list[FakeRequest] = []

    def script(req: FakeRequest) -> FakeReply:
        seen.append(req)
        edit = {"op": "add", "anchor": "Write each calculation on its own line.", "text": "Check the units."}
        return FakeReply(text=json.dumps({"analysis": "units", "edits": [edit]}))

    with FakeModelServer(script) as srv:
        models = Models(env=ProviderEnv(), meter=Meter())
        spec = parse_model_spec(f"openai-compatible:opt@{srv.openai_url}")
        out = await reflect(models, spec, SKILL, [FAILED], [], [], max_edits=1)
    assert out.error is None and [e.anchor for e in out.edits] == ["Write each calculation on its own line."]
    (req,) = seen
    sent = req.json_schema or req.response_format["json_schema"]["schema"]
    assert sent == reply_schema(SKILL, 1)
    assert '"anchor" of an "add" is one of: "", "Solving", "Answer format"' in req.last_user_text
    assert '"anchor" of a "replace" or "delete" is one of: "Read the problem twice."' in req.last_user_text


async def test_a_rejected_worked_example_is_not_listed_to_the_reflection_call_as_an_edit_tried():
    """The reflection prompt lists the edits tried and rejected, each cut to 200 characters, so that
    none is proposed again. A worked example is a train task, not an edit to avoid: cut, it ended in a
    name's first letters ("Jer" of "Jeremy") and the 1.5B wrote edits about that word (MRPC, split 110)."""
    from skillopt.edits import Edit

    seen: list[str] = []

    def script(req: FakeRequest) -> FakeReply:
        seen.append(req.last_user_text)
        edit = {"op": "add", "anchor": "", "text": "Check the units."}
        return FakeReply(text=json.dumps({"analysis": "units", "edits": [edit]}))

    rejected = [Edit(op="add", text="## Worked example\n\nReply the way this example does.\n\nTask:\nJeremy sold 3."),
                Edit(op="add", text="## Examples of expected answers\n\nHow many did Jeremy sell?\nAnswer: 3"),
                Edit(op="add", anchor="Solving", text="Write the units after every number.")]
    with FakeModelServer(script) as srv:
        models = Models(env=ProviderEnv(), meter=Meter())
        spec = parse_model_spec(f"openai-compatible:opt@{srv.openai_url}")
        out = await reflect(models, spec, SKILL, [FAILED], [], rejected, max_edits=1)
    assert out.error is None and len(seen) == 1
    assert "Write the units after every number." in seen[0]  # an edit tried is listed
    assert "Worked example" not in seen[0] and "Jeremy" not in seen[0]


async def test_the_chat_target_sees_the_skill_without_markers():
    seen: list[FakeRequest] = []

    def script(req: FakeRequest) -> FakeReply:
        seen.append(req)
        return FakeReply(text="Answer: 4")

    with FakeModelServer(script) as srv:
        harness = ChatHarness(HarnessContext(models=Models(env=ProviderEnv(), meter=Meter()), options={}))
        spec = parse_model_spec(f"openai-compatible:target@{srv.openai_url}")
        rollout = await harness.run(Task(id="t1", prompt="2+2?"), SKILL, None, spec, Limits())
    assert rollout.error is None
    assert "End with `Answer: <number>`." in seen[0].system and "skillopt:" not in seen[0].system


def test_agent_workspaces_get_the_skill_without_markers(tmp_path):
    path = write_skill(tmp_path, SKILL, ".claude/skills")
    text = path.read_text()
    assert path == tmp_path / ".claude" / "skills" / "math" / "SKILL.md"
    assert "End with `Answer: <number>`." in text and "skillopt:" not in text
    assert Skill.parse(text).name == "math"
