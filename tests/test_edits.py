"""Applying edits: every op and status, drifted anchors, conflicts, protected regions, the token cap."""

from __future__ import annotations

import pytest

from skillopt.edits import ApplyResult, Edit, apply_edits
from skillopt.skill import Skill

BODY = """# Solving math word problems

Read the problem, then work through it step by step before you answer.

## Checks

- Check the units of every quantity.
- Re-read the question before answering.

## Pitfalls

Watch out for percentages that are given as fractions of a different total.

## Answer format
<!-- skillopt:protected -->
End your reply with `Answer: <number>`.
<!-- /skillopt:protected -->

## Notes

Keep it short."""


@pytest.fixture
def skill() -> Skill:
    return Skill(name="grade-school-math", description="Solve math word problems.", body=BODY,
                 extra={"license": "MIT"})


def apply(skill: Skill, *edits: Edit, cap: int | None = None) -> ApplyResult:
    return apply_edits(skill, list(edits), token_cap=cap)


def one(skill: Skill, edit: Edit) -> tuple[str, str]:
    """(status, new body) of one edit."""
    result = apply(skill, edit)
    return result.reports[0].status, result.skill.body


# ---- ops -------------------------------------------------------------------------------------


def test_add_without_anchor_appends(skill: Skill):
    status, body = one(skill, Edit(op="add", text="Show your work."))
    assert status == "applied"
    assert body == BODY + "\n\nShow your work."


def test_add_after_section_goes_before_the_next_heading(skill: Skill):
    status, body = one(skill, Edit(op="add", anchor="## Pitfalls", text="Units differ: km vs m."))
    assert status == "applied"
    assert "different total.\n\nUnits differ: km vs m.\n\n## Answer format" in body


def test_add_after_text_goes_after_its_line_and_joins_lists(skill: Skill):
    status, body = one(skill, Edit(op="add", anchor="Check the units", text="- Estimate before computing."))
    assert status == "applied"
    assert "- Check the units of every quantity.\n- Estimate before computing.\n- Re-read" in body


def test_replace_section_keeps_the_heading(skill: Skill):
    status, body = one(skill, Edit(op="replace", anchor="## Pitfalls", text="Percentages: check the base."))
    assert status == "applied"
    assert "## Pitfalls\n\nPercentages: check the base.\n\n## Answer format" in body
    assert "fractions of a different total" not in body


def test_replace_section_with_a_heading_replaces_the_heading_too(skill: Skill):
    status, body = one(skill, Edit(op="replace", anchor="Pitfalls", text="## Traps\n\nMind the base."))
    assert status == "applied"
    assert "## Pitfalls" not in body
    assert "## Checks" in body and "## Traps\n\nMind the base.\n\n## Answer format" in body


def test_replace_text(skill: Skill):
    status, body = one(skill, Edit(op="replace", anchor="step by step", text="one step at a time"))
    assert status == "applied"
    assert "then work through it one step at a time before you answer." in body


def test_delete_section(skill: Skill):
    status, body = one(skill, Edit(op="delete", anchor="## Pitfalls"))
    assert status == "applied"
    assert "Pitfalls" not in body and "percentages" not in body
    assert "- Re-read the question before answering.\n\n## Answer format" in body


def test_delete_a_whole_line_keeps_the_list_tight(skill: Skill):
    status, body = one(skill, Edit(op="delete", anchor="- Check the units of every quantity."))
    assert status == "applied"
    assert "## Checks\n\n- Re-read the question before answering.\n\n## Pitfalls" in body


def test_delete_a_snippet_inside_a_line(skill: Skill):
    status, body = one(skill, Edit(op="delete", anchor="before you answer"))
    assert status == "applied"
    assert "then work through it step by step.\n" in body


def test_front_matter_is_never_edited(skill: Skill):
    result = apply(skill, Edit(op="replace", anchor="grade-school-math", text="hacked"),
                   Edit(op="add", text="---\nname: other\n---"))
    assert result.reports[0].status == "anchor_not_found"
    assert (result.skill.name, result.skill.description, result.skill.extra) == \
        (skill.name, skill.description, skill.extra)
    assert Skill.parse(result.skill.render()) == result.skill


# ---- statuses --------------------------------------------------------------------------------


def test_anchor_not_found(skill: Skill):
    result = apply(skill, Edit(op="replace", anchor="Use a calculator for long division.", text="x"))
    assert result.reports[0].status == "anchor_not_found"
    assert result.skill == skill
    assert result.applied == [] and result.failed == result.reports


@pytest.mark.parametrize("edit", [
    Edit(op="add", anchor="## Notes", text="  \n"),
    Edit(op="replace", anchor="## Notes", text=""),
    Edit(op="replace", anchor=None, text="x"),
    Edit(op="delete", anchor="   "),
    Edit(op="add", text="<!-- skillopt:protected -->\nmine\n<!-- /skillopt:protected -->"),
])
def test_invalid_edits(skill: Skill, edit: Edit):
    result = apply(skill, edit)
    assert result.reports[0].status == "invalid"
    assert result.reports[0].detail
    assert result.skill == skill


@pytest.mark.parametrize("edit", [
    Edit(op="replace", anchor="## Answer format", text="Answer however you like."),
    Edit(op="delete", anchor="Answer format"),
    Edit(op="replace", anchor="End your reply with `Answer: <number>`.", text="Say the number."),
    Edit(op="delete", anchor="Answer: <number>"),
    Edit(op="add", anchor="End your reply with", text="Or not."),
    Edit(op="replace", anchor="# Solving math word problems", text="Everything new."),
])
def test_edits_touching_a_protected_region_are_blocked(skill: Skill, edit: Edit):
    result = apply(skill, edit)
    assert result.reports[0].status == "protected"
    assert result.skill.body == BODY


def test_add_after_a_protected_section_is_allowed(skill: Skill):
    status, body = one(skill, Edit(op="add", anchor="## Answer format", text="Never add units to the number."))
    assert status == "applied"
    assert "<!-- /skillopt:protected -->\n\nNever add units to the number.\n\n## Notes" in body


def test_two_edits_on_the_same_region_the_later_conflicts(skill: Skill):
    first = Edit(op="replace", anchor="## Pitfalls", text="Check the base of percentages.")
    second = Edit(op="delete", anchor="Check the base of percentages.")
    third = Edit(op="replace", anchor="## Pitfalls", text="Something else.")
    result = apply(skill, first, second, third)
    assert [r.status for r in result.reports] == ["applied", "conflict", "conflict"]
    assert "Check the base of percentages." in result.skill.body
    assert result.applied == [first]
    assert [r.edit for r in result.failed] == [second, third]


def test_an_edit_repeating_a_sentence_already_in_the_skill_is_refused(skill: Skill):
    """A small optimizer proposes the same sentence twice (replace a line, then add it again): the
    repeat adds nothing but tokens, so it is refused, whitespace aside; short list items are not."""
    said = "Explain the reasoning behind each step before giving the final answer."
    result = apply(skill, Edit(op="replace", anchor="Keep it short.", text=said),
                   Edit(op="add", text=said.replace(" each ", "\neach  ")),
                   Edit(op="add", anchor="## Pitfalls", text="Re-read the question before answering, twice."),
                   Edit(op="add", anchor="## Pitfalls", text="- Check the units"))
    assert [r.status for r in result.reports] == ["applied", "invalid", "applied", "applied"], result.reports
    assert "already in the skill" in result.reports[1].detail
    assert result.skill.body.count("reasoning behind each step") == 1
    status, _ = one(skill, Edit(op="add", anchor="## Notes", text="Read the problem, then work through it step by "
                                                                "step before you answer."))
    assert status == "invalid"


def test_an_anchor_removed_by_an_earlier_edit_is_a_conflict(skill: Skill):
    result = apply(skill, Edit(op="delete", anchor="## Checks"),
                   Edit(op="replace", anchor="Re-read the question before answering.", text="Re-read twice."))
    assert [r.status for r in result.reports] == ["applied", "conflict"]
    assert "earlier edit" in result.reports[1].detail


def test_edits_on_different_regions_all_apply(skill: Skill):
    result = apply(skill,
                   Edit(op="add", anchor="## Checks", text="- Estimate first."),
                   Edit(op="add", anchor="## Checks", text="- Then compute."),
                   Edit(op="replace", anchor="Keep it short.", text="Keep it brief."),
                   Edit(op="delete", anchor="## Pitfalls"))
    assert [r.status for r in result.reports] == ["applied"] * 4
    body = result.skill.body
    assert "- Re-read the question before answering.\n- Estimate first.\n- Then compute.\n\n## Answer format" in body
    assert body.endswith("## Notes\n\nKeep it brief.")


def test_ambiguous_anchor_is_a_conflict(skill: Skill):
    twice = skill.with_body(BODY + "\n\n- Check the units of every quantity.")
    result = apply(twice, Edit(op="delete", anchor="Check the units of every quantity."))
    report = result.reports[0]
    assert report.status == "conflict"
    assert "2 places" in report.detail and "lines 7, 23" in report.detail
    assert result.skill == twice


def test_ambiguous_fuzzy_anchor_is_a_conflict(skill: Skill):
    body = BODY + "\n\nAlways check the unit of every quantity.\n\nNote: always check the unit of every quantity!"
    result = apply(skill.with_body(body), Edit(op="delete", anchor="Always check the units of every quantity"))
    assert result.reports[0].status == "conflict"
    assert result.reports[0].match == "fuzzy"


# ---- drifted anchors -------------------------------------------------------------------------


@pytest.mark.parametrize("anchor, how", [
    ("Read the problem, then work through it step by step before you answer.", "exact"),
    ("read the problem, THEN work through it step by step before you answer.", "normalized"),
    ("Read the problem,\n  then work   through it step by step before you answer.", "normalized"),
    ("Read the problem, then work through it step-by-step before you answer.", "fuzzy"),
    ("Read the problem, then walk through it step by step before you answer.", "fuzzy"),
    ("Read the problem then work thru it step by step before answering", "fuzzy"),
])
def test_drifted_text_anchors_still_apply(skill: Skill, anchor: str, how: str):
    result = apply(skill, Edit(op="replace", anchor=anchor, text="Read the problem twice."))
    report = result.reports[0]
    assert (report.status, report.match) == ("applied", how)
    assert "# Solving math word problems\n\nRead the problem twice.\n\n## Checks" in result.skill.body


@pytest.mark.parametrize("anchor, how", [
    ("## Pitfalls", "exact"),
    ("Pitfalls", "exact"),
    ("### pitfalls", "normalized"),
    ("  PITFALLS: ", "normalized"),
    ("## Pitfall", "fuzzy"),
])
def test_drifted_heading_anchors_find_the_section(skill: Skill, anchor: str, how: str):
    result = apply(skill, Edit(op="delete", anchor=anchor))
    assert (result.reports[0].status, result.reports[0].match) == ("applied", how)
    assert "Pitfalls" not in result.skill.body


def test_quotes_and_backticks_are_ignored_when_normalizing():
    s = Skill(name="n", description="d", body="Say \u201cdone\u201d and run `make test` first.")
    result = apply(s, Edit(op="replace", anchor='say "done" and run make test', text="Run the tests."))
    assert result.reports[0].match == "normalized"
    assert result.skill.body == "Run the tests. first."


def test_short_anchors_are_not_matched_fuzzily(skill: Skill):
    assert one(skill, Edit(op="delete", anchor="Kep it shrt"))[0] == "anchor_not_found"
    assert one(skill, Edit(op="delete", anchor="Keep it shirt."))[0] == "applied"  # long enough to drift


# ---- result ----------------------------------------------------------------------------------


def test_over_cap_is_reported_never_truncated(skill: Skill):
    long_text = "Explain every step in full detail. " * 200
    result = apply(skill, Edit(op="add", text=long_text), cap=100)
    assert result.over_cap is True
    assert result.tokens == result.skill.tokens() > 100
    assert long_text.strip() in result.skill.body
    assert apply(skill, Edit(op="add", text="Short."), cap=10_000).over_cap is False
    assert apply(skill, Edit(op="add", text="Short.")).over_cap is False


def test_apply_is_deterministic_and_reports_every_edit(skill: Skill):
    edits = [Edit(op="add", anchor="Checks", text="- Estimate."), Edit(op="delete", anchor="nowhere at all"),
             Edit(op="replace", anchor="Keep it short.", text="Be brief.")]
    a, b = apply_edits(skill, edits), apply_edits(skill, edits)
    assert a.skill.sha == b.skill.sha
    assert len(a.reports) == 3 and a.reports == b.reports
    assert ApplyResult.model_validate_json(a.model_dump_json()) == a


def test_no_edits_leaves_the_skill_unchanged(skill: Skill):
    result = apply(skill)
    assert result.skill.sha == skill.sha and result.reports == []


def test_edit_key_is_stable_under_case_and_whitespace():
    a = Edit(op="add", anchor="## Checks", text="Check  the UNITS.", rationale="r1", evidence=["t1"])
    b = Edit(op="add", anchor="checks", text="check the units.\n", rationale="r2")
    assert a.key == b.key
    assert a.key != Edit(op="replace", anchor="## Checks", text="Check the units.").key
    assert a.key != Edit(op="add", anchor="## Checks", text="Check the signs.").key
    assert Edit(op="add", anchor="  ").anchor is None
