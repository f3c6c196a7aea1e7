"""Edits: add / replace / delete operations on a skill's body, applied with one report per edit.

An edit is anchored on a section heading or on text of the body, found as `skillopt.anchors`
describes (exact, then normalized, then fuzzy; two equal places are a "conflict", never a guess);
`None` means the end of the body (add only). Edits apply in order; an edit that touches what an
earlier edit in the same apply touched is a "conflict"; one that touches a protected region is
"protected". The front matter is never edited but for one field: an edit with `part="description"`
(op `replace`, no anchor) replaces the description, the text agents read before they decide to
load the skill (`train.description`). An edit with `part="file"` targets a supporting file of a
folder skill, named by `path`: `add` creates it (not one that exists), `replace` rewrites it whole,
`delete` removes it; like a section, one edit per file per apply. A skill over the token cap is reported (`over_cap`), never
truncated. Deterministic: no model calls.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from pydantic import BaseModel, Field, field_validator

from skillopt.anchors import Ambiguous, How, Target, anchor_key, normalize, overlaps, resolve
from skillopt.skill import MARKER_RE, Skill, find_protected, find_sections, validate_description

Op = Literal["add", "replace", "delete"]
Part = Literal["body", "description", "file"]
Status = Literal["applied", "anchor_not_found", "conflict", "protected", "invalid"]

_LIST_ITEM = re.compile(r"^[ \t]*(?:[-*+]|\d+[.)])[ \t]")


class Edit(BaseModel):
    """One operation on a skill body. `text` is the new text for add / replace."""

    op: Op
    anchor: str | None = None
    text: str = ""
    rationale: str = ""
    evidence: list[str] = Field(default_factory=list)  # task ids that motivate the edit
    part: Part = "body"  # "description": replaces the front-matter description (op replace, no anchor)
    path: str | None = None  # part "file": the supporting file (relative to the skill folder)

    @field_validator("anchor")
    @classmethod
    def _blank_is_none(cls, v: str | None) -> str | None:
        return v.strip() if v and v.strip() else None

    @property
    def key(self) -> str:
        """A stable id of what the edit does (op, normalized anchor and text), for dedupe."""
        raw = "\x1f".join((self.op, anchor_key(self.anchor or ""), normalize(self.text)[0]))
        if self.part != "body":
            raw = f"{self.part}\x1f{self.path or ''}\x1f{raw}"
        return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:16]


class EditReport(BaseModel):
    edit: Edit
    status: Status
    detail: str
    match: How | None = None  # how the anchor was found, when it was


class ApplyResult(BaseModel):
    skill: Skill
    reports: list[EditReport]
    tokens: int
    over_cap: bool

    @property
    def applied(self) -> list[Edit]:
        return [r.edit for r in self.reports if r.status == "applied"]

    @property
    def failed(self) -> list[EditReport]:
        return [r for r in self.reports if r.status != "applied"]


# ---- applying --------------------------------------------------------------------------------


class Splice(NamedTuple):
    """Replace body[start:end] with text. block: blank-line joins; lines: whole lines; inline: as is."""

    mode: Literal["block", "lines", "inline"]
    start: int
    end: int
    text: str


@dataclass
class _State:
    body: str
    original: str
    touched: list[tuple[int, int]] = field(default_factory=list)  # regions changed so far


def apply_edits(skill: Skill, edits: list[Edit], token_cap: int | None = None) -> ApplyResult:
    """Apply `edits` in order to the body of `skill`; every edit gets a report, none raises."""
    state = _State(body=skill.body, original=skill.body)
    description = skill.description
    files = dict(skill.files)
    touched_files: set[str] = set()
    reports = []
    for e in edits:
        if e.part == "file":
            reports.append(_file_edit(e, files, touched_files))
        elif e.part == "description":
            report = _describe_edit(e, description)
            if report.status == "applied":
                description = " ".join(e.text.split())
            reports.append(report)
        else:
            reports.append(_apply_one(state, e))
    new = skill.with_body(state.body)
    if description != skill.description or files != skill.files:
        new = Skill(name=new.name, description=description, body=new.body, extra=dict(new.extra), files=files)
    tokens = new.tokens()
    return ApplyResult(skill=new, reports=reports, tokens=tokens,
                       over_cap=token_cap is not None and tokens > token_cap)


def _apply_one(st: _State, e: Edit) -> EditReport:
    if problem := _invalid(e):
        return EditReport(edit=e, status="invalid", detail=problem)
    found = resolve(st.body, e.anchor)
    if isinstance(found, Ambiguous):
        where = ", ".join(map(str, found.lines))
        return EditReport(edit=e, status="conflict", match=found.how,
                          detail=f"anchor {e.anchor!r} matches {found.places} places ({found.how}; lines {where}); "
                                 "quote more of the text to make it unique")
    if found is None:
        if st.touched and isinstance(resolve(st.original, e.anchor), Target):
            return EditReport(edit=e, status="conflict",
                              detail=f"anchor {e.anchor!r} was changed by an earlier edit in this step")
        return EditReport(edit=e, status="anchor_not_found", detail=f"anchor {e.anchor!r} is not in the skill")
    sp = _plan(st.body, e, found)
    line = st.body.count("\n", 0, sp.start) + 1
    if any(overlaps(sp.start, sp.end, a, b) for a, b in find_protected(st.body)[0]):
        return EditReport(edit=e, status="protected", match=found.how,
                          detail=f"the target at line {line} touches a protected region")
    if any(overlaps(sp.start, sp.end, a, b) for a, b in st.touched):
        return EditReport(edit=e, status="conflict", match=found.how,
                          detail=f"the target at line {line} was already changed by an earlier edit in this step")
    if e.op != "delete" and _repeats(st.body, sp):
        return EditReport(edit=e, status="invalid", match=found.how,
                          detail="its text is already in the skill: a repeat adds only tokens")
    _splice_into(st, sp)
    return EditReport(edit=e, status="applied", match=found.how, detail=_describe(e, found, line))


REPEAT_MIN_WORDS = 6  # shorter texts (list items, phrases) may well recur


def _repeats(body: str, sp: Splice) -> bool:
    """The splice's text, whitespace aside, already stands in what the body keeps around it: a
    sentence a small optimizer proposes twice in one step, or one the skill already says."""
    words = sp.text.split()
    if len(words) < REPEAT_MIN_WORDS:
        return False
    return " ".join(words) in " ".join(f"{body[:sp.start]} {body[sp.end:]}".split())


def _describe_edit(e: Edit, current: str) -> EditReport:
    """A description edit: one line of text, within the agents' limits, different from the current one."""
    text = " ".join(e.text.split())
    if e.op != "replace":
        return EditReport(edit=e, status="invalid", detail="a description edit is a replace")
    if problems := validate_description(text):
        return EditReport(edit=e, status="invalid", detail="; ".join(problems))
    if "<" in text and ">" in text:
        return EditReport(edit=e, status="invalid", detail="a description may not hold XML tags (Claude refuses them)")
    if text == current:
        return EditReport(edit=e, status="invalid", detail="the description is already this")
    return EditReport(edit=e, status="applied", detail="replaced the description")


def _file_edit(e: Edit, files: dict[str, str], touched: set[str]) -> EditReport:
    """A supporting file added, replaced whole or deleted (in `files`, in place)."""
    from skillopt.skill import MAX_FILE_BYTES, MAX_FILES, file_path_problem

    path = (e.path or "").strip()
    problem = file_path_problem(path) or (f"{e.op} needs non-empty text" if e.op != "delete" and not e.text.strip()
                                          else None)
    if problem is None and len(e.text.encode("utf-8")) > MAX_FILE_BYTES:
        problem = f"a supporting file holds at most {MAX_FILE_BYTES} bytes"
    if problem:
        return EditReport(edit=e, status="invalid", detail=problem)
    if path in touched:
        return EditReport(edit=e, status="conflict", detail=f"file {path!r} was already changed by an earlier edit")
    if e.op == "add" and path in files:
        return EditReport(edit=e, status="conflict", detail=f"file {path!r} exists: replace it instead")
    if e.op != "add" and path not in files:
        return EditReport(edit=e, status="anchor_not_found", detail=f"file {path!r} is not in the skill")
    if e.op == "add" and len(files) >= MAX_FILES:
        return EditReport(edit=e, status="invalid", detail=f"a skill holds at most {MAX_FILES} supporting files")
    touched.add(path)
    if e.op == "delete":
        del files[path]
    else:
        files[path] = e.text if e.text.endswith("\n") else e.text + "\n"
    return EditReport(edit=e, status="applied", detail=f"{e.op} file {path}")


def _invalid(e: Edit) -> str | None:
    if e.op in ("add", "replace") and not e.text.strip():
        return f"{e.op} needs non-empty text"
    if e.op != "add" and e.anchor is None:
        return f"{e.op} needs an anchor (a heading or text of the skill)"
    if e.op != "delete" and MARKER_RE.search(e.text):
        return "edit text may not hold skillopt protected markers"
    return None


def _plan(body: str, e: Edit, t: Target) -> Splice:
    """The splice that carries out `e` on target `t`."""
    text = e.text.strip("\n").rstrip() if e.op != "delete" else ""
    if t.kind == "end":
        return Splice("block", t.end, t.end, text)
    if t.kind == "section":
        assert t.section is not None
        if e.op == "add":
            return Splice("block", t.end, t.end, text)
        if e.op == "replace" and not _starts_with_heading(text):
            return Splice("block", t.section.content_start, t.end, text)
        return Splice("block", t.start, t.end, text)
    if e.op == "add":
        at = _line_end(body, t.end)
        return Splice("block", at, at, text)
    if e.op == "replace":
        return Splice("inline", t.start, t.end, text.strip())
    return _plan_text_delete(body, t.start, t.end)


def _starts_with_heading(text: str) -> bool:
    heads = find_sections(text.lstrip("\n"))
    return bool(heads) and heads[0].start == 0


def _plan_text_delete(body: str, start: int, end: int) -> Splice:
    ls, le = body.rfind("\n", 0, start) + 1, _line_end(body, end)
    if not body[ls:start].strip() and not body[end:le].strip():
        return Splice("lines", ls, min(le + 1, len(body)), "")
    if start > 0 and body[start - 1] == " " and (end == len(body) or body[end] in " \n.,;:!?)"):
        start -= 1
    return Splice("inline", start, end, "")


def _line_end(body: str, pos: int) -> int:
    i = body.find("\n", pos)
    return len(body) if i < 0 else i


def _sep(left: str, right: str) -> str:
    """Blank line between blocks; one newline between two list items."""
    last = left.rsplit("\n", 1)[-1]
    first = right.split("\n", 1)[0]
    return "\n" if _LIST_ITEM.match(last) and _LIST_ITEM.match(first) else "\n\n"


def _splice_into(st: _State, sp: Splice) -> None:
    body = st.body
    if sp.mode == "inline":
        before, text, after = body[:sp.start], sp.text, body[sp.end:]
        new = before + text + after
        new_s = len(before)
    elif sp.mode == "lines":
        before, text, after = body[:sp.start], "", body[sp.end:]
        while after.startswith("\n") and (before.endswith("\n\n") or not before):
            after = after[1:]
        new, new_s = before + after, len(before)
    else:
        before, text = body[:sp.start].rstrip(), sp.text
        after = re.sub(r"\A(?:[ \t]*\n)+", "", body[sp.end:])
        mid = before + (_sep(before, text) if before and text else "") + text
        new = mid + (_sep(mid, after) if mid and after else "") + after
        new_s = len(mid) - len(text)
    new_span = (new_s, new_s + len(text))
    old_s, old_e = len(before), len(body) - len(after)
    st.touched = [_shift(span, old_s, old_e, len(new) - len(body), new_span) for span in st.touched]
    st.touched.append(new_span)
    st.body = new


def _shift(span: tuple[int, int], old_s: int, old_e: int, delta: int,
           new_span: tuple[int, int]) -> tuple[int, int]:
    """Where an earlier touched span lies after body[old_s:old_e] was replaced (shifting by delta)."""
    if span[1] <= old_s:
        return span
    if span[0] >= old_e:
        return span[0] + delta, span[1] + delta
    return new_span


def _describe(e: Edit, t: Target, line: int) -> str:
    how = f" ({t.how} match)" if t.how != "end" else ""
    if t.kind == "end":
        return "appended at the end of the body"
    what = f"section {t.section.heading!r}" if t.section else f"text at line {line}"
    verb = {"add": "added after", "replace": "replaced", "delete": "deleted"}[e.op]
    return f"{verb} {what}{how}"
