"""Anchors: where an edit's anchor is in a skill body (`resolve`), a heading's whole section or a span of text.

An anchor is a section heading ("## Answer format" or "Answer format"), or text of the body;
`None` means the end of the body. It is found in three stages, the first that matches wins:

1. exact: the heading line or title, else the anchor text verbatim;
2. normalized: case, runs of whitespace, backticks / asterisks, curly quotes and a leading
   Markdown '#' prefix are ignored;
3. fuzzy: small wording drift (difflib ratio >= `FUZZY_RATIO` over windows of a similar number
   of words, or over heading titles).

Within a stage a heading beats plain text. Two places matching equally well is `Ambiguous`, never
a guess. A heading anchor means its whole section (heading up to the next heading of the same or a
higher level).
"""

from __future__ import annotations

import difflib
import re
from typing import Literal, NamedTuple

from skillopt.skill import Section, find_sections

FUZZY_RATIO = 0.85
AMBIGUITY_MARGIN = 0.03  # a second place within this ratio of the best makes a fuzzy match ambiguous
FUZZY_MIN_CHARS = 12  # shorter text anchors are matched exactly or normalized only

How = Literal["exact", "normalized", "fuzzy", "end"]

_TRANSLATE = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"',
                            "\u2013": "-", "\u2014": "-", "\u00a0": " "})
_DROPPED = frozenset("`*")


def normalize(text: str) -> tuple[str, list[int]]:
    """Lowercase, whitespace runs as one space, '`' and '*' dropped; with each char's offset in `text`."""
    chars: list[str] = []
    where: list[int] = []
    for i, c in enumerate(text.translate(_TRANSLATE)):
        if c in _DROPPED or (c.isspace() and (not chars or chars[-1] == " ")):
            continue
        low = " " if c.isspace() else c.lower()
        chars.append(low if len(low) == 1 else c)
        where.append(i)
    if chars and chars[-1] == " ":
        chars.pop()
        where.pop()
    return "".join(chars), where


def anchor_key(anchor: str) -> str:
    return re.sub(r"^#+ ?", "", normalize(anchor)[0])


def _title_key(title: str) -> str:
    return anchor_key(title).rstrip(":.# ")


class Target(NamedTuple):
    """Where an anchor landed: a section, a text span, or the end of the body."""

    kind: Literal["section", "text", "end"]
    start: int
    end: int
    how: How
    section: Section | None = None


class Ambiguous(NamedTuple):
    how: How
    places: int
    lines: list[int]


def resolve(body: str, anchor: str | None) -> Target | Ambiguous | None:
    """Find `anchor` in `body`: a unique `Target`, `Ambiguous`, or None when nowhere."""
    if anchor is None:
        return Target("end", len(body), len(body), "end")
    sections = find_sections(body)
    single_line = "\n" not in anchor
    for how in ("exact", "normalized", "fuzzy"):
        heads = _section_hits(sections, anchor, how) if single_line else []
        hits = heads or _text_hits(body, anchor, how)
        picked = _pick(hits, how)
        if not picked:
            continue
        if len(picked) > 1:
            return Ambiguous(how, len(picked), sorted({body.count("\n", 0, s) + 1 for _, s, _ in picked}))
        _, start, end = picked[0]
        if heads:
            sec = next(s for s in sections if s.start == start)
            return Target("section", sec.start, sec.end, how, sec)
        return Target("text", start, end, how)
    return None


def _section_hits(sections: list[Section], anchor: str, how: str) -> list[tuple[float, int, int]]:
    key = _title_key(anchor)
    out = []
    for s in sections:
        if how == "exact":
            r = 1.0 if anchor in (s.title, s.text.split("\n", 1)[0].strip()) else 0.0
        elif how == "normalized":
            r = 1.0 if key and _title_key(s.title) == key else 0.0
        else:
            r = difflib.SequenceMatcher(None, _title_key(s.title), key).ratio() if len(key) >= 4 else 0.0
        if r >= FUZZY_RATIO:
            out.append((r, s.start, s.end))
    return out


def _text_hits(body: str, anchor: str, how: str) -> list[tuple[float, int, int]]:
    if how == "exact":
        spans = [(s, s + len(anchor)) for s in _find_all(body, anchor)]
    elif how == "normalized":
        nbody, where = normalize(body)
        key = anchor_key(anchor)
        spans = [_widen(body, where[s], where[s + len(key) - 1] + 1) for s in _find_all(nbody, key)]
    else:
        key = anchor_key(anchor)
        return _fuzzy_hits(body, key) if len(key) >= FUZZY_MIN_CHARS else []
    return [(1.0, s, e) for s, e in spans if _on_word_edges(body, s, e)]


def _widen(body: str, start: int, end: int) -> tuple[int, int]:
    """Take in the markup characters that normalizing dropped at either edge (`code`, **bold**)."""
    while start > 0 and body[start - 1] in _DROPPED:
        start -= 1
    while end < len(body) and body[end] in _DROPPED:
        end += 1
    return start, end


def _on_word_edges(body: str, start: int, end: int) -> bool:
    """A text match may not begin or end in the middle of a word."""
    cut_before = start > 0 and body[start - 1].isalnum() and body[start].isalnum()
    cut_after = end < len(body) and body[end - 1].isalnum() and body[end].isalnum()
    return not (cut_before or cut_after)


def _find_all(haystack: str, needle: str) -> list[int]:  # overlapping occurrences too
    out, i = [], haystack.find(needle)
    while needle and i >= 0:
        out.append(i)
        i = haystack.find(needle, i + 1)
    return out


def _fuzzy_hits(body: str, key: str) -> list[tuple[float, int, int]]:
    """Windows of about as many words as the anchor whose normalized text is close to it."""
    words = [(m.start(), m.end(), w) for m in re.finditer(r"\S+", body) if (w := normalize(m.group())[0])]
    n = len(key.split(" "))
    matcher = difflib.SequenceMatcher(None, "", key, autojunk=False)
    hits = []
    for i in range(len(words)):
        for width in range(max(1, n - 2), n + 3):
            if i + width > len(words):
                break
            matcher.set_seq1(" ".join(w for _, _, w in words[i:i + width]))
            if matcher.real_quick_ratio() < FUZZY_RATIO or matcher.quick_ratio() < FUZZY_RATIO:
                continue
            if (r := matcher.ratio()) >= FUZZY_RATIO:
                hits.append((r, words[i][0], words[i + width - 1][1]))
    return hits


def _pick(hits: list[tuple[float, int, int]], how: str) -> list[tuple[float, int, int]]:
    """The best hit, plus every other place (not overlapping it) that matches about as well."""
    if not hits:
        return []
    ranked = sorted(hits, key=lambda h: (-h[0], h[1], h[2]))
    best = ranked[0]
    margin = AMBIGUITY_MARGIN if how == "fuzzy" else 0.0
    rivals: list[tuple[float, int, int]] = []
    for h in ranked[1:]:
        if h[0] >= best[0] - margin and not overlaps(best[1], best[2], h[1], h[2]) \
                and not any(overlaps(r[1], r[2], h[1], h[2]) for r in rivals):
            rivals.append(h)
    return [best, *rivals]


def overlaps(a: int, b: int, x: int, y: int) -> bool:
    """Do [a, b) and [x, y) share text? A zero-width span overlaps only a span strictly around it."""
    if a == b:
        return x < a < y
    if x == y:
        return a < x < b
    return a < y and x < b
