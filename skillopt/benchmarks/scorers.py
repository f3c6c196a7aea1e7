"""Answer scorers: pure functions from a model's reply (and the reference) to a `Score`.

Every scorer first finds the final answer with `find_answer` (an explicit `Answer:`, `####`,
`\\boxed{}` or "the answer is" marker, else the last line), then compares. None raises for a bad
reply: a reply with no usable answer scores zero, and `feedback` says why in a line the optimizer
can act on ("expected 18, got 16 (from the 'Answer:' line)").
"""

from __future__ import annotations

import re
import string
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

from skillopt.benchmarks.base import Score

LETTERS = string.ascii_uppercase


@dataclass(frozen=True)
class Extracted:
    """The final-answer span of a reply and the marker it was found by (None: the last line)."""

    text: str
    marker: str | None

    @property
    def where(self) -> str:
        return {
            None: "the last line",
            "answer": "the 'Answer:' line",
            "answer is": "'the answer is ...'",
            "####": "the '####' line",
            "boxed": "\\boxed{}",
        }[self.marker]


# ---------------------------------------------------------------- finding the answer

_BOLD = re.compile(r"\*\*|__")
_LINE_MARKERS = (
    ("####", re.compile(r"####[ \t]*(.*)")),
    ("answer", re.compile(r"(?i)\b(?:final[ \t]+)?answer[ \t]*[:：][ \t]*(.*)")),
    ("answer is", re.compile(r"(?i)\b(?:final[ \t]+)?answer[ \t]+is[ \t]*:?[ \t]*(.*)")),
)
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_TEXT_CMD = re.compile(r"\\(?:text|textbf|mathrm|mathbf)\{([^{}]*)\}")


def _boxed(text: str) -> tuple[int, str] | None:
    """The last `\\boxed{...}` (braces balanced) as (position, content)."""
    found = None
    for m in _BOXED.finditer(text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            found = (m.start(), text[m.end() : i - 1])
    return found


def _clean(span: str) -> str:
    span = _TEXT_CMD.sub(r"\1", span).strip()
    return span.strip("*$` \t").strip()


def find_answer(text: str) -> Extracted:
    """The final answer of a reply: the last explicit marker (`Answer:`, `####`, `\\boxed{}`), else
    the last "the answer is ...", else the last non-empty line."""
    text = _BOLD.sub("", text or "")
    strong: list[tuple[int, str, str]] = []
    weak: list[tuple[int, str, str]] = []
    for marker, rx in _LINE_MARKERS:
        for m in rx.finditer(text):
            span = m.group(1).strip()
            if not span:  # "Answer:" alone on its line: the answer is on the next one
                rest = [ln.strip() for ln in text[m.end() :].splitlines() if ln.strip()]
                span = rest[0] if rest else ""
            if span:
                (weak if marker == "answer is" else strong).append((m.start(), marker, span))
    boxed = _boxed(text)
    if boxed and boxed[1].strip():
        strong.append((boxed[0], "boxed", boxed[1]))
    for found in (strong, weak):
        if found:
            _, marker, span = max(found, key=lambda f: f[0])
            return Extracted(_clean(span), marker)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return Extracted(_clean(lines[-1]) if lines else "", None)


def extract_answer(text: str) -> str:
    """The final-answer text of a reply (see `find_answer`)."""
    return find_answer(text).text


# ---------------------------------------------------------------- normalized text and token F1

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation + "‘’“”")


def normalize_text(s: str) -> str:
    """Lowercase, drop punctuation and articles, collapse whitespace (the SQuAD normalization)."""
    s = (s or "").lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", s).split())


def token_f1(prediction: str, reference: str) -> float:
    """Bag-of-tokens F1 between two texts after `normalize_text`."""
    pred, ref = normalize_text(prediction).split(), normalize_text(reference).split()
    if not pred or not ref:
        return float(pred == ref)
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def _short(s: str, n: int = 80) -> str:
    s = " ".join(s.split())
    return s if len(s) <= n else s[: n - 3] + "..."


def exact_match(text: str, answers: Sequence[str]) -> Score:
    """Hard: the final answer equals an accepted answer after normalization. Soft: best token F1."""
    got = find_answer(text)
    if not got.text:
        return Score(hard=0, soft=0, feedback=f"empty answer (expected {answers[0]!r})")
    norm = normalize_text(got.text)
    if any(norm == normalize_text(a) for a in answers):
        return Score(hard=1, soft=1, feedback=f"correct: {_short(got.text)!r}")
    f1 = max((token_f1(got.text, a) for a in answers), default=0.0)
    return Score(hard=0, soft=f1,
                 feedback=f"expected {answers[0]!r}, got {_short(got.text)!r} (from {got.where}; token F1 {f1:.2f})")


def f1_match(text: str, answers: Sequence[str], threshold: float = 0.8) -> Score:
    """Soft: best token F1 against the accepted answers; hard: that F1 reaches `threshold`."""
    got = find_answer(text)
    f1 = max((token_f1(got.text, a) for a in answers), default=0.0)
    hard = float(f1 >= threshold)
    verdict = "correct" if hard else f"expected {answers[0]!r}"
    return Score(hard=hard, soft=f1, feedback=f"{verdict}, got {_short(got.text)!r} (token F1 {f1:.2f})")


# ---------------------------------------------------------------- numbers

_FRAC_TEX = re.compile(r"\\d?frac\s*\{\s*([-−]?[\d.,]+)\s*\}\s*\{\s*([\d.,]+)\s*\}")
_NUMBER = re.compile(
    r"(?<![\w.])(?P<sign>[-−]?)\$?(?P<num>\d{1,3}(?:,\d{3})+(?!\d)(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
    r"(?:[ \t]*/[ \t]*(?P<den>\d+(?:\.\d+)?)(?![\d/]))?"
)


@dataclass(frozen=True)
class Number:
    value: Fraction
    raw: str  # as written, for feedback


def find_numbers(text: str) -> list[Number]:
    """Every number in a text, in order: `1,234`, `$5.00`, `-3`, `0.5`, `3/4`, `\\frac{3}{4}`."""
    text = _FRAC_TEX.sub(r"\1/\2", (text or "").replace("{,}", ","))
    found = []
    for m in _NUMBER.finditer(text):
        value = Fraction(m["num"].replace(",", ""))
        if m["den"] and Fraction(m["den"]) != 0:
            value /= Fraction(m["den"])
        if m["sign"]:
            value = -value
        found.append(Number(value, m.group(0).strip()))
    return found


def parse_number(s: str) -> Fraction | None:
    """The value of a text that is exactly one number (`"1,234"`, `"-3"`, `"$5.00"`, `"3/4"`), else None."""
    s = (s or "").strip().rstrip(".").strip()
    if s.isascii() and s.isdigit():  # the common case, without the regex
        return Fraction(int(s))
    nums = find_numbers(s)
    if len(nums) != 1:
        return None
    rest = s.replace(nums[0].raw, "", 1).strip()
    return nums[0].value if rest in ("", "%", "$") else None


def final_number(text: str) -> tuple[Number, str] | None:
    """The reply's final number and where it came from: the last number of the marked answer, else
    the last number anywhere in the reply."""
    got = find_answer(text)
    if got.marker:
        nums = find_numbers(got.text)
        if nums:
            return nums[-1], f"from {got.where}"
    nums = find_numbers(_BOLD.sub("", text or ""))
    return (nums[-1], "last number in the answer") if nums else None


def _close(a: Fraction, b: Fraction, rel_tol: float, abs_tol: float) -> bool:
    """Within tolerance, in exact arithmetic: a reply may hold a number too large for a float."""
    return a == b or abs(a - b) <= max(Fraction(abs_tol), Fraction(rel_tol) * max(abs(a), abs(b)))


def numeric_match(text: str, answers: Sequence[str], rel_tol: float = 1e-6, abs_tol: float = 1e-9) -> Score:
    """Hard = soft: the reply's final number equals an accepted number within tolerance."""
    refs = [v for v in (parse_number(a) for a in answers) if v is not None]
    if not refs:
        raise ValueError(f"numeric_match needs numeric reference answers, got {list(answers)!r}")
    expected = answers[0].strip()
    found = final_number(text)
    if found is None:
        return Score(hard=0, soft=0, feedback=f"no final number found (expected {expected}); "
                                              "end with a line 'Answer: <number>'")
    num, where = found
    if any(_close(num.value, r, rel_tol, abs_tol) for r in refs):
        return Score(hard=1, soft=1, feedback=f"correct: {num.raw} ({where})")
    return Score(hard=0, soft=0, feedback=f"expected {expected}, got {num.raw} ({where})")


# ---------------------------------------------------------------- multiple choice

_SINGLE = re.compile(r"^[(\[]?([A-Za-z])[)\]]?[.:]?$")
_PAREN = re.compile(r"^[(\[]([A-Za-z])[)\]]")
_PUNCTED = re.compile(r"^([A-Za-z])[.):](?:\s|$)")
_NAMED = re.compile(r"(?i)^(?:option|choice|letter)\s*[(\[]?([A-Za-z])\b")
_LETTER_THEN_TEXT = re.compile(r"^[(\[]?([A-Z])[)\].:]?\s+(.+)$", re.S)
_ANY_PAREN = re.compile(r"\(([A-Z])\)")
_PHRASED = re.compile(r"(?i:\b(?:option|choice|answer))\s+(?i:is\s+)?[(\[]?([A-Z])[)\]]?(?!\w)")


def _letter_in_span(span: str, choices: Sequence[str], marked: bool) -> str | None:
    """The letter a final-answer span names. After an explicit marker "C)", "(C) ...", "Option C"
    count; on a bare last line only a lone letter or a letter followed by its own choice text."""
    patterns = (_SINGLE, _PAREN, _PUNCTED, _NAMED) if marked else (_SINGLE,)
    for rx in patterns:
        m = rx.match(span)
        if m:
            return m.group(1).upper()
    m = _LETTER_THEN_TEXT.match(span)  # "C. Planetary days will ..." : a letter, then its choice text
    if m and m.group(1) in LETTERS[: len(choices)]:
        own = normalize_text(choices[LETTERS.index(m.group(1))])
        if own and normalize_text(m.group(2)).startswith(own[:30]):
            return m.group(1)
        if marked and m.group(1) != "A":  # "Answer: C because ..."; "A ..." may be the article
            return m.group(1)
    return None


def _choice_by_text(span: str, choices: Sequence[str]) -> str | None:
    """The letter whose choice text the span is (or, failing that, uniquely contains)."""
    norm = normalize_text(span)
    if not norm:
        return None
    texts = [normalize_text(c) for c in choices]
    equal = [i for i, t in enumerate(texts) if t and t == norm]
    if len(equal) == 1:
        return LETTERS[equal[0]]
    inside = [i for i, t in enumerate(texts) if t and re.search(rf"(?<!\w){re.escape(t)}(?!\w)", norm)]
    return LETTERS[inside[0]] if len(inside) == 1 else None


def extract_choice(text: str, choices: Sequence[str] = ()) -> tuple[str | None, str]:
    """The chosen letter of a multiple-choice reply (upper case, possibly out of range) and where it
    was found; (None, reason) when the reply names no choice."""
    got = find_answer(text)
    letter = _letter_in_span(got.text, choices, marked=got.marker is not None)
    if letter:
        return letter, f"from {got.where}"
    letter = _choice_by_text(got.text, choices) if choices else None
    if letter:
        return letter, f"choice text in {got.where}"
    phrased = _PHRASED.findall(_BOLD.sub("", text or ""))
    if phrased:
        return phrased[-1], "'option X' in the answer"
    marked = set(_ANY_PAREN.findall(_BOLD.sub("", text or "")))
    if len(marked) == 1:
        return marked.pop(), "the only (X) in the answer"
    return None, "no choice letter found"


def choice_match(text: str, answer: str, choices: Sequence[str] = ()) -> Score:
    """Hard = soft: the reply's chosen letter is `answer` (a letter; `choices` give the range and
    let a reply that quotes a choice's text count as choosing it)."""
    expected = answer.strip().upper()
    valid = LETTERS[: len(choices)] if choices else LETTERS[:5]

    def show(letter: str) -> str:
        i = LETTERS.index(letter)
        return f"{letter} ({_short(choices[i], 50)})" if i < len(choices) else letter

    letter, where = extract_choice(text, choices)
    if letter is None:
        return Score(hard=0, soft=0, feedback=f"no choice letter found (expected {show(expected)}); "
                                              "end with a line 'Answer: <letter>'")
    if letter not in valid:
        return Score(hard=0, soft=0, feedback=f"expected {show(expected)}, got {letter} ({where}), "
                                              f"which is not one of {valid[0]}-{valid[-1]}")
    if letter == expected:
        return Score(hard=1, soft=1, feedback=f"correct: {letter} ({where})")
    return Score(hard=0, soft=0, feedback=f"expected {show(expected)}, got {show(letter)} ({where})")
