"""The Skill document: parse / render round trip, hashing, sections, protected regions, bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from skillopt.errors import BadInput
from skillopt.skill import Skill, validate_description, validate_name

REPO = Path(__file__).resolve().parents[1]

DOC = """---
name: grade-school-math
description: Solve math word problems step by step.
license: MIT
allowed-tools: [Read, Grep]
---

# Solving math word problems

Read the problem, then work through it step by step.

## Checks

- Check the units.
- Re-read the question.

### Code

```python
# not a heading
x = 1
```

## Answer format
<!-- skillopt:protected -->
End your reply with `Answer: <number>`.
<!-- /skillopt:protected -->
"""


@pytest.fixture
def skill() -> Skill:
    return Skill.parse(DOC, source="SKILL.md")


def test_parse_reads_front_matter_and_body(skill: Skill):
    assert skill.name == "grade-school-math"
    assert skill.description == "Solve math word problems step by step."
    assert skill.extra == {"license": "MIT", "allowed-tools": ["Read", "Grep"]}
    assert skill.body.startswith("# Solving math word problems")
    assert skill.body.endswith("<!-- /skillopt:protected -->")


def test_round_trip_is_exact_and_stable(skill: Skill):
    text = skill.render()
    again = Skill.parse(text)
    assert again == skill
    assert again.render() == text
    assert text.startswith("---\nname: grade-school-math\ndescription: ")


def test_round_trip_of_awkward_values():
    s = Skill(name="  x-1 ", description="yes: it is\nmulti-line #1", body="\n\n  \r\nbody line  \r\n\n",
              extra={"version": "1.0", "on": True, "meta": {"b": 2, "a": [1, "two"]}})
    assert s.body == "body line"
    assert s.name == "x-1"
    assert Skill.parse(s.render()) == s


def test_render_is_canonical_so_sha_ignores_key_order_and_line_ends():
    a = Skill.parse("---\nname: n\ndescription: d\nb: 2\na: 1\n---\nBody\n")
    b = Skill.parse("\ufeff---\r\ndescription: d\r\na: 1\r\nname: n\r\nb: 2\r\n---\r\n\r\n\r\nBody   \r\n")
    assert a.render() == b.render()
    assert a.sha == b.sha
    assert len(a.sha) == 64 and a.short_sha == a.sha[:12]
    assert a.with_body("Other").sha != a.sha


def test_sha_is_sha256_of_render(skill: Skill):
    import hashlib

    assert skill.sha == hashlib.sha256(skill.render().encode()).hexdigest()
    assert Skill.parse(skill.render()).sha == skill.sha


def test_with_body_keeps_front_matter(skill: Skill):
    new = skill.with_body("\n\nNew body\n\n")
    assert (new.name, new.description, new.extra) == (skill.name, skill.description, skill.extra)
    assert new.body == "New body"


def test_sections_follow_headings_and_skip_fenced_code(skill: Skill):
    secs = skill.sections()
    assert [(s.title, s.level) for s in secs] == [
        ("Solving math word problems", 1), ("Checks", 2), ("Code", 3), ("Answer format", 2)]
    top, checks, code, answer = secs
    assert top.start == 0 and top.end == len(skill.body)
    assert checks.end == answer.start  # "Checks" holds its "Code" subsection
    assert code.end == answer.start
    assert "# not a heading" in code.text
    assert answer.text == skill.body[answer.start:answer.end]
    assert skill.body[checks.start:checks.content_start] == "## Checks\n"
    assert answer.heading == "## Answer format"


def test_sections_handle_tilde_fences_and_closing_hashes():
    s = Skill(name="n", description="d", body="## A ##\n~~~\n## inside\n~~~\n#no-space\n# B")
    assert [(x.title, x.level) for x in s.sections()] == [("A", 2), ("B", 1)]


def test_protected_spans_and_strip_markers(skill: Skill):
    (start, end), = skill.protected_spans()
    region = skill.body[start:end]
    assert region.startswith("<!-- skillopt:protected -->")
    assert region.endswith("<!-- /skillopt:protected -->")
    assert "End your reply with `Answer: <number>`." in region
    plain = skill.strip_markers()
    assert "skillopt:protected" not in plain.render()
    assert "## Answer format\nEnd your reply with `Answer: <number>`." in plain.body
    assert plain.protected_spans() == []


def test_unpaired_protected_marker_is_bad_input():
    with pytest.raises(BadInput, match="never closed"):
        Skill.parse("---\nname: n\ndescription: d\n---\n<!-- skillopt:protected -->\nx\n", source="s.md")
    with pytest.raises(BadInput, match="unpaired"):
        Skill.parse("---\nname: n\ndescription: d\n---\nx\n<!-- /skillopt:protected -->\n", source="s.md")


def test_unclosed_region_in_a_built_skill_protects_to_the_end():
    s = Skill(name="n", description="d", body="a\n<!-- skillopt:protected -->\nb")
    assert s.protected_spans() == [(2, len(s.body))]


def test_tokens_is_chars_over_four(skill: Skill):
    assert skill.tokens() == -(-len(skill.render()) // 4)
    assert skill.with_body(skill.body + "\n\n" + "word " * 400).tokens() > skill.tokens() + 450


def test_validate_name_and_description():
    assert validate_name("grade-school-math") == []
    assert validate_name("") == ["name is empty"]
    assert validate_name("Bad_Name")
    assert validate_name("-x") and validate_name("a--b")
    assert validate_name("a" * 65)
    assert validate_description("Does things.") == []
    assert validate_description("  ") == ["description is empty"]
    assert validate_description("x" * 1025)
    assert Skill(name="Bad Name", description="d", body="").problems()


@pytest.mark.parametrize("text, message", [
    ("# no front matter\n", "must start with YAML front matter"),
    ("---\nname: n\ndescription: d\n# body\n", "not closed"),
    ("---\nname: [unclosed\ndescription: d\n---\nbody\n", "invalid YAML"),
    ("---\ndescription: d\n---\nbody\n", "'name'"),
    ("---\nname: n\n---\nbody\n", "'description'"),
    ("---\nname: n\ndescription: ''\n---\nbody\n", "'description'"),
    ("---\n- a list\n---\nbody\n", "mapping"),
    ("---\nname: [a, b]\ndescription: d\n---\nbody\n", "must be text"),
])
def test_bad_documents_are_one_line_bad_input_naming_the_source(tmp_path: Path, text: str, message: str):
    path = tmp_path / "SKILL.md"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(BadInput) as err:
        Skill.load(path)
    assert message in str(err.value)
    assert str(path) in str(err.value)
    assert "\n" not in str(err.value)


def test_unreadable_and_non_utf8_files(tmp_path: Path):
    with pytest.raises(BadInput, match="cannot read skill file") as err:
        Skill.load(tmp_path / "missing.md")
    assert "missing.md" in str(err.value)
    bad = tmp_path / "latin1.md"
    bad.write_bytes("---\nname: n\ndescription: caf\xe9\n---\n".encode("latin-1"))
    with pytest.raises(BadInput, match="not UTF-8") as err:
        Skill.load(bad)
    assert str(bad) in str(err.value)


def test_load_accepts_a_skill_folder(tmp_path: Path):
    (tmp_path / "SKILL.md").write_text(DOC, encoding="utf-8")
    assert Skill.load(tmp_path).name == "grade-school-math"


@pytest.mark.parametrize("path", sorted((REPO / "skills").glob("*/SKILL.md")), ids=lambda p: p.parent.name)
def test_shipped_seed_skills_are_valid(path: Path):
    s = Skill.load(path)
    assert s.problems() == []
    assert Skill.parse(s.render()) == s
    assert s.protected_spans()
