"""Facts about a batch's failures, counted by code rather than by the optimizer, for the prompts of
the proposers that read failures (`optimizer.rules`, `optimizer.reflect`).

A small optimizer model writes a concrete rule from counted facts far more often than from raw
replies: with a reference answer, how the agent's answers differ from the expected ones
(`answer_facts`); with code checked by running it, what the checks said (`check_kind`,
`check_facts`): a name that did not exist, an exception, a time-out, a value beside the expected
one, replies that defined no function where the tests called one, and failed replies that were one
same text.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from skillopt.benchmarks.scorers import find_answer, normalize_text, parse_number
from skillopt.optimizer.types import ScoredRollout


def counted_facts(failures: Sequence[ScoredRollout]) -> list[str]:
    """The facts of these failures: the answers' differences when they have references, else what
    their checks said."""
    return answer_facts(failures) or check_facts(failures)


CHECK_KINDS = {"no-answer": "no code", "undefined": "a function or command that did not exist",
               "error": "an error before any value", "timeout": "a time-out", "wrong": "another value"}


def checked_facts(failures: Sequence[ScoredRollout]) -> list[str]:
    """For failures of code checked by running it (no reference answer; else nothing): what the checks
    found, each kind counted (`check_kind`), then `check_facts`. The reflection prompt's minibatch
    mixes kinds, which the rules proposer's clusters do not."""
    if not failures or any(r.reference.strip() for r in failures):
        return []
    n, kinds = len(failures), Counter(check_kind(r) for r in failures)
    found = ", ".join(f"{CHECK_KINDS[k]} in {c} of {n}" for k, c in kinds.most_common())
    return [f"the checks found: {found}", *check_facts(failures)]


def answer_facts(failures: Sequence[ScoredRollout]) -> list[str]:
    """What the scorer's feedback shows, counted over the failures by code (not by the optimizer):
    how the agent's final answers differ from the expected ones. A small optimizer model writes a
    concrete rule from counted facts far more often than from the raw replies alone. A task with no
    reference answer (a function checked by its tests) has no such fact: its scorer's feedback is shown."""
    pairs = [(normalize_text(stated_answer(r.output)), normalize_text(r.reference), r) for r in failures
             if r.reference.strip()]
    n = len(pairs)
    if not n:
        return []
    kinds: dict[str, list[tuple[str, str]]] = {}
    for got, exp, r in pairs:
        g, e = got.split(), exp.split()
        if not g:
            kind = "no answer was found in the reply"
        elif is_numeric(exp) and not is_numeric(got):
            kind = "a number was expected and the agent wrote words"
        elif is_numeric(got) and not is_numeric(exp):
            kind = "words were expected and the agent wrote a number"
        elif is_numeric(got) and is_numeric(exp):
            kind = "both are numbers, but different ones"
        elif e and _contains(g, e):
            kind = "the expected answer is inside the agent's answer, which adds words"
        elif g and _contains(e, g):
            kind = "the agent's answer is part of the expected one, which has more words"
        elif set(g) & set(e):
            kind = "the answers share some words but differ"
        else:
            kind = "a different answer altogether (no word in common)"
        kinds.setdefault(kind, []).append((stated_answer(r.output)[:60], r.reference[:60]))
    out = []
    for kind, examples in sorted(kinds.items(), key=lambda kv: -len(kv[1])):
        shown = "; ".join(f"agent '{a}', expected '{b}'" for a, b in examples[:2])
        out.append(f"{len(examples)} of {n}: {kind} (e.g. {shown})")
    words_got = sum(len(g.split()) for g, _, _ in pairs) / n
    words_exp = sum(len(e.split()) for _, e, _ in pairs) / n
    out.append(f"on average the agent's final answers have {words_got:.1f} words, the expected ones {words_exp:.1f}")
    return out


MAX_LABEL_WORDS = 3  # a label is a short text answer: "entailment", "not_entailment", "yes"
MAX_LABELS = 12  # a label set a rule can name whole


def label_facts(scored: Sequence[ScoredRollout], references: Sequence[str] | None = None) -> list[str]:
    """A closed answer set: when the expected answers of the train tasks (`references`: the whole train
    split's, which the optimizer may read; else this step's) are a few short text labels that recur
    (`entailment` / `not_entailment`, `yes` / `no`, a user's own categories), the labels are the data's
    vocabulary, which no prompt may state and which the agent cannot guess; naming them is a rule for
    every task, not a copy of one task's answer (the leakage check agrees: `LeakageCheck` takes the
    labels). Then how many of this step's failed answers were none of them. Nothing when the answers are
    numbers, hold alternatives, or mostly differ."""
    found = closed_labels(step_references(scored) if references is None else references)
    if not found:
        return []
    labels = ", ".join(f"'{label}' in {c}" for label, c in found)
    tasks = sum(c for _, c in found)  # every task expects one of the labels
    out = [f"the expected answers of {tasks} train tasks are a few labels the data reuses: {labels} "
           "(a rule may name these labels)"]
    failed = [r for r in scored if r.failed and not r.error and r.reference.strip()]
    if failed:
        out.append(f"{len(outside_labels(failed, found))} of {len(failed)} failed answers were none of these labels")
    return out


def step_references(scored: Sequence[ScoredRollout]) -> list[str]:
    """The expected answers of a step's scored rollouts."""
    return [r.reference.strip() for r in scored if not r.error and r.reference.strip()]


def closed_labels(references: Sequence[str]) -> list[tuple[str, int]]:
    """The closed answer set of these expected answers (see `label_facts`): each label as the data writes
    it, with how many of the tasks expect it, most frequent first; [] when they are no such set."""
    refs = [x.strip() for x in references if x.strip()]
    if len(refs) < 4 or any(" | " in x or is_numeric(x) or len(x.split()) > MAX_LABEL_WORDS for x in refs):
        return []
    counts = Counter(normalize_text(x) for x in refs)
    # one answer for every task is no label set, only a batch that happened to agree (seen on MRPC: a step of
    # 8 `equivalent` pairs became "answer with 'equivalent'", a constant answer); answers most of which differ
    # (trivia) are none either: the labels recur, and few answers are a label used once
    singles = sum(1 for c in counts.values() if c == 1)
    if not 2 <= len(counts) <= min(MAX_LABELS, len(refs) // 2) or counts.most_common(1)[0][1] < 2 \
            or singles > len(refs) // 4:
        return []
    shown = {normalize_text(x): x for x in reversed(refs)}  # each label as the data writes it
    return [(shown[k], c) for k, c in counts.most_common()]


def outside_labels(failed: Sequence[ScoredRollout], labels: Sequence[tuple[str, int]]) -> list[ScoredRollout]:
    """The failed rollouts whose stated answer is none of the labels."""
    known = {normalize_text(label) for label, _ in labels}
    return [r for r in failed if normalize_text(stated_answer(r.output)) not in known]


def stated_answer(output: str) -> str:
    """The final answer a reply states, or "" when it states none: with no answer marker (`Answer:`,
    `\\boxed{}`, "the answer is"), the last line of a reply of several lines is where its working
    stopped (often cut by the reply cap), not an answer. Seen on MATH prealgebra: two cut replies
    ending "The equation of a horizontal line is \\(" were counted as words written for a number."""
    found = find_answer(output)
    if found.marker is None and sum(1 for ln in output.splitlines() if ln.strip()) > 1:
        return ""
    return found.text


# What a code task's checks say (benchmarks/code.py, swe): a name that does not exist where the code
# ran, an exception other than a failed assert, a time-out, or a value beside the one expected.
_UNDEFINED = re.compile(r"command not found|NameError: name '[^']*' is not defined")
_TIMED_OUT = re.compile(r"timed out|ran past \d+ ?s\b")
_RAISED = re.compile(r"\b((?!Assertion)[A-Z]\w*(?:Error|Exception))\b")
# what bash said, up to the parenthesis that closes it (the text may hold parentheses of its own)
_SAID = re.compile(r"\(bash said: (.*?)\)(?=; |\s\(code from|$)")
# where the shell says it was (bash's "bash: line 3: ", dash's "/bin/sh: 3: "): not part of what it said
_WHERE = re.compile(r"^(?:[\w./-]+: )*(?:-c: )?(?:line )?\d+: ")
_BC = re.compile(r"^\(standard_in\) \d+: ")  # where bc (run by the code) says it was: "bc" is what matters
# a function defined in the reply: Python's `def name(`, bash's `name() {` or `function name`
_DEFINES = re.compile(r"^\s*(?:async\s+)?def\s+\w+\s*\(|^\s*[\w.-]+\s*\(\s*\)\s*(?:\{|$)|^\s*function\s+[\w.-]+", re.M)
_VALUE = re.compile(r"(`[^`]+`|\S+\(.*?\)) (printed|returned) ('.*?'|\S+?), expected ('.*?'|[^;()]+?)(?= \(|;|$)")


def check_kind(r: ScoredRollout) -> str:
    """What went wrong with code checked by running it (a rollout with no reference answer)."""
    fb = r.feedback
    if not r.output.strip() or fb.lower().startswith(("no code", "empty")):
        return "no-answer"
    if _UNDEFINED.search(fb):
        return "undefined"
    if _TIMED_OUT.search(fb):
        return "timeout"
    if _RAISED.search(fb) or "the program failed" in fb or "bash said" in fb:
        return "error"
    return "wrong"


def check_facts(failures: Sequence[ScoredRollout]) -> list[str]:
    """What the checks of code tasks said, counted by code over the failures of one cluster (its kind
    is named by the prompt): the exceptions raised and the shell's complaints (the called function's
    own name replaced, so that one complaint of many tasks counts as one), a few values printed or
    returned beside the ones expected, replies that defined no function where the tests called one,
    and failed replies that were one and the same text. The train tasks' own checks, shown to the
    optimizer only."""
    n = len(failures)
    out: list[str] = []
    raised = Counter(e for r in failures for e in dict.fromkeys(_RAISED.findall(r.feedback)))
    if raised:
        out.append("raised: " + ", ".join(f"{e} in {k} of {n}" for e, k in raised.most_common(3)))
    said: dict[str, list[str]] = {}  # a complaint -> what it was about, one per failure
    for r in failures:
        for complaint, about in dict(_complaints(r.feedback)).items():
            said.setdefault(complaint, []).append(about)
    if said:
        common = sorted(said.items(), key=lambda kv: -len(kv[1]))[:3]
        out.append("the shell said: " + "; ".join(f"'{c}' in {len(on)} of {n}{shown_subjects(on)}" for c, on in common))
    values = [m for r in failures for m in _VALUE.findall(r.feedback)[:1] if m[2] not in ("''", '""')]
    if values:
        out.append("values given beside the ones expected: " + "; ".join(
            f"{call[:60]} {verb} {got[:60]}, expected {want[:60]}" for call, verb, got, want in values[:3]))
    bare = sum(1 for r in failures if check_kind(r) == "undefined" and not _DEFINES.search(r.output))
    if bare:  # what a person reads off a name that did not exist: the reply never wrote the function
        out.append(f"{bare} of {n} failed replies defined no function at all, and the tests called one")
    for text, k in Counter(" ".join(r.output.split()) for r in failures).most_common(2):
        if k >= 2:
            out.append(f"{k} of {n} failed replies were this same text: '{text[:120]}'")
    return out


def _complaints(feedback: str) -> list[tuple[str, str]]:
    """The shell's last complaints in a check's feedback, each as (what it said, what it said it of).
    Bash writes "<where>: line 3: <what>: <message>": the message is what recurs across tasks (a
    decimal in `$(( ))` is "syntax error: invalid arithmetic operator" whatever the expression), so
    the place goes, and the expression is set apart to be shown beside the count, not counted; the
    called function's own name becomes "<the function called>", as one name of many tasks."""
    called = set(re.findall(r"`([\w.-]+)", feedback))
    out = []
    for text in _SAID.findall(feedback):
        message, about = shell_complaint(text)
        if about in called or (not about and message.endswith("command not found")):
            out.append((f"<the function called>: {message}"[:80], ""))
        elif message:
            out.append(((f"...: {message}" if about else message)[:80], about[:40]))
    return out


def shell_complaint(text: str) -> tuple[str, str]:
    """One complaint of a shell, as (its message, what it was about): "<where>: line 3: <what>:
    <message>" from bash, "/bin/sh: 3: <what>: <message>" from dash. The place goes; the message is
    what recurs across tasks; what it was about ("import", an expression) is set apart. A complaint
    with no "<what>: " before a worded message (dash's 'Syntax error: "(" unexpected') is all message."""
    text = _BC.sub("bc: ", _WHERE.sub("", text.strip())).split(" (error token is")[0].strip()
    about, sep, message = text.partition(": ")
    if not sep or not message[:1].isalpha():
        return text, ""
    return message, about.strip()


def shown_subjects(about: Sequence[str]) -> str:
    """Up to two of the things a complaint was about, as the count's example."""
    shown = list(dict.fromkeys(a for a in about if a))[:2]
    return f" (on {', '.join(repr(a) for a in shown)})" if shown else ""


def is_numeric(text: str) -> bool:
    return bool(text) and parse_number(text.replace(" ", "")) is not None


def _contains(words: list[str], part: list[str]) -> bool:
    k = len(part)
    return len(words) > k and any(words[i:i + k] == part for i in range(len(words) - k + 1))


def _token(w: str) -> str:
    w = w.strip(".")
    if re.fullmatch(r"[0-9]+(?:\.[0-9]+)?", w):  # 1200.00 -> 1200, 0.50 -> 0.5
        w = w.rstrip("0").rstrip(".") if "." in w else w
    return w


def normalize_answer(text: str) -> str:
    """Lower case, words and numbers only, thousands separators and trailing zeros dropped."""
    text = re.sub(r"(?<=[0-9]),(?=[0-9]{3})", "", text.lower())
    return " ".join(t for t in map(_token, re.sub(r"[^a-z0-9.]+", " ", text).split()) if t)
