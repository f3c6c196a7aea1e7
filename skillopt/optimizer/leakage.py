"""The leakage check: an edit must be a general rule, not text copied from the tasks it came from.

Before any rollout, each edit's new text is compared with the train tasks the optimizer was shown
(their prompts and reference answers). An edit is rejected when it

- shares a run of `N` words or more with a task prompt, unless that run is boilerplate (it occurs
  in the prompts of several tasks, or is already in the skill), or
- shares a run of `M` content words with a task prompt, the words between them aside (articles,
  prepositions: a small model rewords one task with an article added, "find the maximum sum of a
  bi-tonic sub-sequence in a given array", and no run of `N` words is left), under the same
  exception, or
- contains a task's reference answer (a number of two digits or more, or a text answer of two
  characters or more) as a whole token, unless the skill already holds it or it is a label: a text
  answer two or more of the shown tasks share (`entailment`, `yes`) is the data's vocabulary, which
  a rule for every task may name (`optimizer.facts.label_facts`), not one task's content, as is a
  label of the train split's closed answer set (`labels`), or
- repeats a quantity of a task together with a word next to it in that task ("2 fruits"), or
- names what only one task names: a word that task's prompt capitalizes mid-sentence (a person, a
  place: "Determine Anthony's pencils first"), or a name of code in it, snake_case or camelCase (the
  function one task asks for: a reflection on mbpp-bash added "function count_Rectangles {" and
  "function compute_Last_Digit() {", the two train tasks it was shown, and the gate spent 29
  validation pairs on it), which no other shown task has and the skill lacks.

A worked example made by the demonstration strategy quotes its own train task by design; it is
checked against the other tasks for copied runs of words only (`runs_only`, exact runs): a number
in its reply that happens to be another task's answer is a coincidence, not a copy.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from skillopt.benchmarks.base import Task
from skillopt.edits import Edit

N = 6  # words in a copied run
M = 5  # content words in a reworded run
_WORD = re.compile(r"[a-z0-9]+(?:[.,][0-9]+)*")
# the words a rewording adds or drops without changing what is said
_FUNCTION_WORDS = frozenset("a an the of in on for to and or is are be with by as at from that this its".split())


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _grams(words: list[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def _content(words: list[str]) -> list[str]:
    return [w for w in words if w not in _FUNCTION_WORDS]


def _names(text: str) -> set[str]:
    """The words a text capitalizes mid-sentence (after a word, not after a full stop), lower-cased."""
    return {m.group(1).lower() for m in re.finditer(r"(?<=[a-z0-9,;] )([A-Z][a-z]+)", text)}


_IDENT = re.compile(r"\b(?:[A-Za-z][A-Za-z0-9]*_[A-Za-z0-9_]*|[a-z]+[A-Z][A-Za-z0-9]*)\b")


def _identifiers(text: str) -> set[str]:
    """The names of code a text holds (`count_Rectangles`, `maxLen`), lower-cased; the word pattern
    (`_WORD`) splits them into words no other check would single out."""
    return {m.lower() for m in _IDENT.findall(text)}


def _is_number(w: str) -> bool:
    return bool(re.fullmatch(r"[0-9]+(?:[.,][0-9]+)*", w))


@dataclass(frozen=True)
class LeakFinding:
    edit: int  # index in the candidate's edits
    task_id: str
    what: str  # what was copied

    def __str__(self) -> str:
        return f"edit {self.edit + 1} copies {self.what} from task {self.task_id}"


class LeakageCheck:
    """Built once per step from the train tasks the optimizer saw; `check` is pure and cheap."""

    def __init__(self, tasks: Sequence[Task], skill_text: str, n: int = N, runs_only: bool = False,
                 own: Sequence[Task] = (), labels: Sequence[str] = ()):
        """`own`: tasks the edits may quote (a worked example's own task): never checked against, but
        their prompts count when telling boilerplate, since a run of words the example's task shares
        with one other task is the benchmark's wording (MBPP's "Your code should pass tests like this
        one"), not a copy. `labels`: the train split's closed answer set (`facts.closed_labels`), which
        an edit may name though the shown tasks hold one of its labels once."""
        self.n, self.runs_only = n, runs_only
        self.tasks = list(tasks)
        self.skill_words = set(_words(skill_text))
        self.skill_grams = _grams(_words(skill_text), n) | _grams(_content(_words(skill_text)), M)
        self.prompt_words = {t.id: _words(t.prompt) for t in self.tasks}
        # each prompt's runs, exact and reworded, computed once: every edit is checked against them
        self.runs = {tid: _grams(words, n) for tid, words in self.prompt_words.items()}
        self.reworded_runs = {tid: _grams(_content(words), M) for tid, words in self.prompt_words.items()}
        counts: Counter[tuple[str, ...]] = Counter()
        for tid in self.prompt_words:
            counts.update(self.runs[tid] | self.reworded_runs[tid])
        for words in (_words(t.prompt) for t in own if t.id not in self.prompt_words):
            counts.update(_grams(words, n) | _grams(_content(words), M))
        self.boilerplate = {g for g, c in counts.items() if c >= 2}
        answers = Counter(" ".join(_words(a)) for t in self.tasks for a in set(t.answers))
        self.labels = {a for a, c in answers.items() if c >= 2 and not all(map(_is_number, a.split()))}
        self.labels |= {" ".join(_words(label)) for label in labels if _words(label)}
        named = {t.id: _names(t.prompt) | _identifiers(t.prompt) for t in self.tasks}
        seen = Counter(n for names in named.values() for n in names)
        known = self.skill_words | _identifiers(skill_text)
        self.names = {tid: {n for n in names if seen[n] == 1} - known for tid, names in named.items()}

    def check(self, edits: Sequence[Edit]) -> list[LeakFinding]:
        findings = []
        for i, e in enumerate(edits):
            if e.op == "delete" or not e.text.strip():
                continue
            finding = self._first_leak(i, e.text)
            if finding:
                findings.append(finding)
        return findings

    def _first_leak(self, i: int, text: str) -> LeakFinding | None:
        words = _words(text)
        named = [*words, *sorted(_identifiers(text))]
        grams = _grams(words, self.n) - self.skill_grams - self.boilerplate
        reworded = _grams(_content(words), M) - self.skill_grams - self.boilerplate
        for t in self.tasks:
            shared = grams & self.runs[t.id]
            if shared:
                return LeakFinding(i, t.id, f"'{' '.join(sorted(shared)[0])}'")
            if self.runs_only:
                continue
            shared = reworded & self.reworded_runs[t.id]
            if shared:
                return LeakFinding(i, t.id, f"a reworded run '{' '.join(sorted(shared)[0])}'")
            answer = self._answer_in(words, t)
            if answer:
                return LeakFinding(i, t.id, f"its reference answer '{answer}'")
            quantity = self._quantity_in(words, t)
            if quantity:
                return LeakFinding(i, t.id, f"its quantity '{quantity}'")
            name = next((w for w in named if w in self.names[t.id]), None)
            if name:
                return LeakFinding(i, t.id, f"its name '{name}'")
        return None

    def _answer_in(self, words: list[str], task: Task) -> str | None:
        joined = f" {' '.join(words)} "
        for label in sorted(self.labels, key=len, reverse=True):  # a label named is no answer copied,
            joined = joined.replace(f" {label} ", " | ")              # nor is a part of it ('not entailment')
        for answer in task.answers:
            aw = _words(answer)
            text = " ".join(aw)
            if not aw or set(aw) <= self.skill_words or text in self.labels:
                continue
            long_enough = (len(text) >= 2 and int(text.replace(",", "").split(".")[0] or 0) >= 10
                           if len(aw) == 1 and _is_number(aw[0]) else len(text) >= 2)
            if long_enough and f" {text} " in joined:
                return answer
        return None

    def _quantity_in(self, words: list[str], task: Task) -> str | None:
        prompt = self.prompt_words[task.id]
        pairs = {(a, b) for a, b in zip(prompt, prompt[1:]) if _is_number(a) or _is_number(b)}
        for a, b in zip(words, words[1:]):
            number = a if _is_number(a) else b if _is_number(b) else None
            if number is None or number in self.skill_words:
                continue
            if (a, b) in pairs:
                return f"{a} {b}"
        return None
