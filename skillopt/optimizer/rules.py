"""Rules learned from the scorer's feedback: one rule per cluster of failures, as playbook bullets.

A small optimizer model asked to "improve the skill" over a few whole rollouts tends to restate
the skill or to name one task. Asked a narrower question it does better: here are the answers the
agent gave, the answers the scorer expected and what the scorer said, side by side; what do the
expected answers have in common that the agent's did not do? The answer is one rule (a convention
of form, a fact or rule of the domain that recurs, a step that was skipped), added as one bullet
to the skill's "Rules" section: an incremental playbook in the manner of ACE, never a rewrite.

Failures are clustered first, by what went wrong in a way any scorer shows:
- `no-label`: the data answers every task with one of a few labels (the train split's closed answer
  set, `facts.closed_labels`) and the reply's answer was none of them: the labels are what to learn;
- `wrong-label`: the reply's answer was one of those labels and the data expected another: the agent
  knows the labels, not when each applies (on MRPC, once the label rule was accepted, the failures
  left were these; shown as `wrong` or, "not_equivalent" holding "equivalent", as `answer-present`,
  the 1.5B restated the label rule in five of five later rules);
- `answer-present`: the expected answer is in the reply but was not accepted (its form or place);
- `no-answer`: the scorer found no answer (or no code), or the reply was empty;
- `long-answer`: the expected answer is a short phrase (a few words, not a number) and the reply's
  answer a sentence around something else: how many words an answer takes is what to learn (SQuAD's
  spans, Natural Questions' entities; the target writes "X was severely damaged." for "lasting damage");
- `wrong`: the reply answered something else (code: it ran and gave another value).
A task checked by running code has no expected answer to compare; what its checks said sorts it:
- `undefined`: the tests called a function, or the code ran a command, that did not exist;
- `error`: the code stopped with an error before giving a value;
- `timeout`: the code ran out of time.
Facts counted by code go with each cluster (`optimizer.facts`): how the answers differ
from the expected ones, or what the checks printed and raised, and failed replies that were the
same text (a small target that answers many tasks with one degenerate reply, a file name, is met
more often than one would think; counted, the pattern is plain to the optimizer).
Each rule comes from one cluster, with the replies that passed shown beside it for contrast. A
rule is a candidate like any other: the leakage check, then the screen on the tasks it came from
(the rule verified on its own evidence before validation), then the gate.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, lru_cache

import snowballstemmer
from pydantic import BaseModel, Field

from skillopt.benchmarks.scorers import normalize_text
from skillopt.edits import Edit
from skillopt.models.router import Models, StructuredFailure
from skillopt.models.spec import ModelSpec
from skillopt.models.types import Message
from skillopt.optimizer.facts import (
    check_kind, closed_labels, counted_facts, is_numeric, label_facts, normalize_answer, stated_answer,
)
from skillopt.optimizer.propose import Proposal, SearchState
from skillopt.optimizer.reflect import anchor_before_protected, quotes_tasks
from skillopt.optimizer.types import ScoredRollout, bounded_schema
from skillopt.prompts import render
from skillopt.record import Candidate, Reflection
from skillopt.skill import Skill

SECTION = "Rules"
MAX_RULE_CHARS = 300
SHOWN_FAILURES = 6  # failures shown per call
SHOWN_PASSES = 2
REPLY_TAIL = 300  # characters of a reply shown: its end, where the answer is
KINDS = ("no-label", "wrong-label", "answer-present", "no-answer", "long-answer", "undefined", "error", "timeout",
         "wrong")
SHORT_ANSWER_WORDS = 4  # an expected answer of at most this many words is a short phrase (`long-answer`)
LONG_ANSWER_WORDS = 5  # a stated answer of at least this many words, and 3 more than expected, is a sentence
LABEL_QUOTE_WORDS = 3  # words of a failed reply quoted beside its label: enough to show a sentence, too few to
# say what it claimed (on RTE, six words quoted "not supported by..." beside the label 'entailment')
EXAMPLES = " For example: "  # what follows in a rule quotes its own train failures (see `with_examples`)


def restates_instructions(rule: str, n: int = 5) -> bool:
    """The rule repeats a run of `n` words of the prompt's own instructions (a small model parrots
    its instructions instead of writing a rule)."""
    grams = word_grams(rule, n)
    return bool(grams & _instruction_grams(n))


def word_grams(text: str, n: int) -> set[tuple[str, ...]]:
    """Runs of `n` words, each cut to its stem ("copying" and "copy" alike: a small model echoes its
    instructions with the verb's form changed, "avoid copying names, numbers, or phrases")."""
    words = _words(text)
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def _words(text: str) -> list[str]:
    return [_stem(w) for w in re.findall(r"[a-z0-9']+", text.lower())]


_STEMMER = snowballstemmer.stemmer("english")  # Porter's English stemmer, as Snowball maintains it


@lru_cache(maxsize=1 << 16)  # Snowball costs about 13 us a word, 11 times the suffix list it replaced
def _stem(word: str) -> str:
    """The word without its ending: "copying" and "copy", "structures" and "structure", "different" and
    "differ" alike (on MRPC report seed 111 the 1.5B restated its accepted rule "... If they are
    different in content or structure ..." as "When the sentences differ in structure ...")."""
    return _STEMMER.stemWord(word)


_PROMPT_GRAMS: dict[tuple[str, int, str], frozenset[tuple[str, ...]]] = {}


def prompt_grams(template: str, n: int, **values) -> frozenset[tuple[str, ...]]:
    """The runs of `n` words of a prompt template's own instructions: the template rendered with
    `values` that hold no task (cached). What an optimizer reply shares with these parrots its
    prompt instead of saying something of its own."""
    key = (template, n, repr(sorted(values.items())))
    if key not in _PROMPT_GRAMS:
        _PROMPT_GRAMS[key] = frozenset(word_grams(render(template, **values), n))
    return _PROMPT_GRAMS[key]


@cache
def _instruction_grams(n: int) -> frozenset[tuple[str, ...]]:
    """The rules prompt's instructions, every branch of them (one per kind of failure, for answers
    and for code)."""
    empty = dict(skill_text="", failures=[], passes=[], tail=reply_tail, rules=[], rejected=[], facts=[], labels=[])
    return frozenset().union(*(prompt_grams("rules.md.j2", n, kind=k, code=code, **empty)
                               for k in KINDS for code in (False, True)))


def split_quotes(text: str) -> tuple[str, str]:
    """A rule's own words, and the answers it quotes ("" when it quotes none)."""
    rule, _, quoted = text.partition(EXAMPLES)
    return rule, quoted


_SCORER_WORDS = re.compile(r"\b(expected (answer|one|output)s?|the scorer|scorer's|reference answers?)\b", re.I)


def speaks_of_the_scorer(rule: str) -> bool:
    """The rule talks about the expected answers or the scorer, which the agent never sees ("give a
    different answer than the expected one"): not an instruction it can follow."""
    return bool(_SCORER_WORDS.search(split_quotes(rule)[0]))


class RuleReply(BaseModel):
    pattern: str = Field("", description="what the expected answers have in common that the failed replies lack")
    rule: str = Field("", description="one rule for every task of this kind")


@dataclass(frozen=True)
class Cluster:
    kind: str
    failures: tuple[ScoredRollout, ...]


def failure_kind(r: ScoredRollout, labels: Sequence[str] = ()) -> str:
    """What went wrong, in terms any scorer shows (see the module docstring). `labels`: the train split's
    closed answer set, if it has one."""
    if not r.reference.strip():  # code checked by running it: what the checks said
        return check_kind(r)
    known = {normalize_text(label) for label in labels}
    if normalize_text(r.reference) in known and normalize_text(stated_answer(r.output)) not in known:
        return "no-label"
    if normalize_text(r.reference) in known:  # one of the labels written for another: when each applies
        return "wrong-label"
    out, ref = normalize_answer(r.output), normalize_answer(r.reference)
    if not out or "no answer" in r.feedback.lower() or "empty" in r.feedback.lower():
        return "no-answer"
    if len(ref) >= 2 and f" {ref} " in f" {out} ":
        return "answer-present"
    if is_long_answer(stated_answer(r.output), first_answer(r)):
        return "long-answer"
    return "wrong"


def first_answer(r: ScoredRollout) -> str:
    """The first of the expected answers a reference lists with " | "."""
    return r.reference.split(" | ")[0].strip()


def is_long_answer(stated: str, expected: str) -> bool:
    """A sentence written where the data wants a short phrase (`long-answer`)."""
    got, exp = normalize_answer(stated).split(), normalize_answer(expected).split()
    return (0 < len(exp) <= SHORT_ANSWER_WORDS and not is_numeric(" ".join(exp))
            and len(got) >= max(LONG_ANSWER_WORDS, len(exp) + 3))


def cluster_failures(scored: Sequence[ScoredRollout], labels: Sequence[str] = ()) -> list[Cluster]:
    """The failures (not errored rollouts) grouped by `failure_kind`, largest group first."""
    groups: dict[str, list[ScoredRollout]] = {k: [] for k in KINDS}
    for r in scored:
        if r.failed and not r.error:
            groups[failure_kind(r, labels)].append(r)
    clusters = [Cluster(k, tuple(v)) for k, v in groups.items() if v]
    return sorted(clusters, key=lambda c: (-len(c.failures), KINDS.index(c.kind)))


def plan_calls(clusters: Sequence[Cluster], count: int) -> list[tuple[Cluster, int]]:
    """`count` calls over the clusters, largest first; a cluster asked twice shows other failures
    the second time (an offset into it), or is sampled again when it has no more."""
    if not clusters:
        return []
    return [(clusters[i % len(clusters)], i // len(clusters)) for i in range(count)]


def rules_in(skill: Skill) -> list[str]:
    """The bullets of the skill's rules section."""
    for s in skill.sections():
        if s.title == SECTION:
            text = skill.body[s.start:s.end]
            return [ln.strip()[2:].strip() for ln in text.splitlines() if ln.strip().startswith(("- ", "* "))]
    return []


def rule_edit(skill: Skill, rule: str, why: str, evidence: list[str]) -> Edit:
    """One bullet added to the rules section, which is made (before the first protected section, or
    at the end) when the skill has none."""
    bullet = "- " + " ".join(rule.split())
    if any(s.title == SECTION for s in skill.sections()):
        return Edit(op="add", anchor=SECTION, text=bullet, rationale=why, evidence=evidence)
    return Edit(op="add", anchor=anchor_before_protected(skill), text=f"## {SECTION}\n\n{bullet}",
                rationale=why, evidence=evidence)


def reply_schema() -> dict:
    return bounded_schema(RuleReply, pattern=(0, 300), rule=(10, MAX_RULE_CHARS))


def reply_tail(text: str) -> str:
    """The end of a reply, where its answer is, as the optimizer's prompts show it."""
    text = text.strip()
    return text if len(text) <= REPLY_TAIL else "... " + text[-REPLY_TAIL:]


class RuleProposer:
    """`count` rules a step, each from one cluster of this step's failed train rollouts."""

    name = "rules"

    def __init__(self, models: Models, spec: ModelSpec, count: int = 2, max_tokens: int | None = None,
                 temperature: float | None = None, retries: int = 2, examples: int = 2, labels: bool = True,
                 redraws: int = 1):
        self.models, self.spec, self.count, self.retries, self.examples = models, spec, count, retries, examples
        self.redraws = redraws  # more draws when a reply's rule fails a check (`_one`)
        self.labels = labels  # show the train split's closed answer set (`facts.label_facts`)
        self.max_tokens, self.temperature = max_tokens, temperature

    async def propose(self, state: SearchState) -> Proposal:
        labels = [label for label, _ in closed_labels(state.references())] if self.labels else []
        calls = plan_calls(cluster_failures(state.scored, labels), self.count)
        if not calls:
            return Proposal()
        self.models.meter.check()
        passes = [r for r in state.scored if not r.failed and not r.error]
        counted = label_facts(state.scored, state.references()) if labels else []  # the same for every cluster
        results = await asyncio.gather(*[self._one(state, c, k, passes, labels, counted) for c, k in calls])
        out = []
        for drawn, edit in results:
            if edit is not None:
                out.append(Candidate(id="", step=state.step, origin="rules", parent=state.version, edits=[edit],
                                     rationale=drawn[-1].analysis, sources=list(edit.evidence)))
        return Proposal(out, [reflection for drawn, _ in results for reflection in drawn])

    async def _one(self, state: SearchState, cluster: Cluster, k: int, passes: list[ScoredRollout],
                   labels: Sequence[str] = (), counted: Sequence[str] = ()) -> tuple[list[Reflection], Edit | None]:
        shown = _window(cluster.failures, k)
        rules = rules_in(state.skill)
        rejected = [e.text for e in state.rejected if e.text.strip() and not quotes_tasks(e.text)][-8:]
        facts = [*counted, *counted_facts(cluster.failures)]
        contrast = passes[:SHOWN_PASSES]
        prompt = render("rules.md.j2", skill_text=state.skill.render(), kind=cluster.kind, failures=shown,
                        passes=contrast, tail=reply_tail, rules=rules, rejected=rejected,
                        labels=list(labels), facts=facts, code=not any(r.reference.strip() for r in shown))
        ask = Ask(prompt, cluster, tuple(shown), tuple(labels), tuple(facts), (*rules, *rejected),
                  tuple(r.prompt for r in (*shown, *contrast)))
        sample = k if len(cluster.failures) <= SHOWN_FAILURES * k else 0  # same failures again: another draw
        drawn: list[Reflection] = []
        for redraw in range(self.redraws + 1):
            # a reply whose rule fails a check below is drawn again, warmer and with another seed: a small
            # optimizer writes a usable rule in some draws, not all (on MRPC a draw said the "expected
            # answer labels" are 'equivalent' or 'not_equivalent': the right labels, in words the agent
            # never sees), and one more call is cheaper than a step without a rule
            seed = sample + 100 * redraw
            temperature = max(self.temperature or 0.0, 0.8) if seed else self.temperature
            reflection, edit = await self._draw(state.skill, ask, temperature, seed or None)
            drawn.append(reflection)
            if edit is not None or reflection.transient:
                break
        return drawn, edit

    async def _draw(self, skill: Skill, ask: Ask, temperature: float | None,
                    seed: int | None) -> tuple[Reflection, Edit | None]:
        ids = [r.task_id for r in ask.shown]
        for _ in range(self.retries + 1):
            reply = await self.models.chat_json(self.spec, [Message(role="user", content=ask.prompt)], RuleReply,
                                                role="optimizer", max_tokens=self.max_tokens,
                                                temperature=temperature, json_schema=reply_schema(), seed=seed)
            if not (isinstance(reply, StructuredFailure) and reply.transient):
                break
        if isinstance(reply, StructuredFailure):
            return Reflection(minibatch=ids, error=reply.error, transient=reply.transient), None
        rule = " ".join(reply.rule.split()).lstrip("-* ")
        refused = refusal(rule, ask)
        if refused:
            return Reflection(minibatch=ids, analysis=reply.pattern, error=refused), None
        why = f"{ask.cluster.kind}: {reply.pattern}".strip()[:400]
        starts = ask.cluster.kind in ("no-label", "long-answer")  # what to show is the sentence written, not its words
        edit = rule_edit(skill, with_examples(rule, ask.shown, self.examples, starts=starts, labels=ask.labels),
                         why, ids)
        return Reflection(minibatch=ids, edits=[edit], analysis=why), edit


@dataclass(frozen=True)
class Ask:
    """One request for a rule: its prompt and what the reply's rule is checked against."""

    prompt: str
    cluster: Cluster
    shown: tuple[ScoredRollout, ...]  # the failures the prompt shows
    labels: tuple[str, ...]  # the train split's closed answer set, if any
    facts: tuple[str, ...]  # the counted facts the prompt shows
    earlier: tuple[str, ...]  # rules the skill has, and rules tried and rejected
    seen: tuple[str, ...] = ()  # the prompts of the tasks the prompt shows, failed and solved


def refusal(rule: str, ask: Ask) -> str | None:
    """Why a drawn rule is no rule to try (None: it is one)."""
    if len(rule) < 10:
        return "the reply held no rule"
    if speaks_of_the_scorer(rule):
        return f"the rule speaks of the expected answers, which the agent never sees: {rule[:120]}"
    if restates_instructions(rule):
        return f"the rule restates the instructions, not the failures: {rule[:120]}"
    if echoes(rule, ask.facts):
        return f"the rule is a counted fact, not an instruction: {rule[:120]}"
    if repeats(rule, ask.earlier):
        return f"the rule repeats one the skill has or one tried and rejected: {rule[:120]}"
    if any(r.reference.strip() for r in ask.shown):  # code quotes its language's capitalised words ('True')
        named = names_a_task(rule, ask.seen, ask.labels)
        if named:
            return f"the rule names {named!r}, a name or number of the tasks it was shown: {rule[:120]}"
    return None


_QUOTED = re.compile(r"(?<!\w)(['\"])([^'\"\n]{1,80}?)\1(?!\w)")


def names_a_task(rule: str, prompts: Sequence[str], allowed: Sequence[str] = ()) -> str | None:
    """A passage the rule quotes (before the answers it quotes, `split_quotes`) that is a name or a
    number of the tasks it was shown: each of its words capitalised or holding a digit, and the start
    of a word of one of `prompts` that not all of them have (words every prompt has are the data's
    frame: 'Sentence 1'). A label (`allowed`) is no name. The rules prompt says a rule that copies the
    tasks' names or numbers is rejected; the 1.5B wrote "such as 'HAINAN PROVINCE'" (MRPC, development
    split seed 2) and "the word 'Jer'", the start of a train task's "Jeremy" (report split seed 110):
    words a new task will not have."""
    frame = set.intersection(*(set(re.findall(r"\w+", p)) for p in prompts)) if len(prompts) > 1 else set()
    known = " ".join(allowed).lower()
    for _, quoted in _QUOTED.findall(split_quotes(rule)[0]):
        words = re.findall(r"[^\W_]+", quoted)
        if not words or quoted.lower() in known:
            continue
        if all((w[0].isupper() or any(c.isdigit() for c in w)) and w not in frame
               and any(re.search(rf"\b{re.escape(w)}", p) for p in prompts) for w in words):
            return quoted
    return None


REPEAT_SHARE = 0.8  # of a text's word triples found in one earlier text: a repeat of it


def echoes(rule: str, facts: Sequence[str]) -> bool:
    """The rule's words are all inside one line of the counted facts it was shown, in order (the 1.5B
    answered "a different answer altogether (no word in common)": a fact's kind, not an instruction)."""
    own = " ".join(_words(split_quotes(rule)[0]))
    return bool(own) and any(f" {own} " in f" {' '.join(_words(f))} " for f in facts)


def repeats(rule: str, earlier: Sequence[str]) -> bool:
    """Most of the rule's own word triples (before the answers it quotes) are in one rule the skill
    has or one tried and rejected: in the later epochs of a 3-epoch RTE run the 1.5B wrote the
    skill's own rule again, and the gate spent a decision on a skill that said it twice. A rule that
    shares an opening ("The agent should answer 'not_entailment' when the hypothesis ...") and states
    another condition is no repeat. The word check reads the whole rule, its quotes too: the 1.5B
    copies the skill's "For example: 'equivalent', not ..." into its own rule after a comma, where
    `split_quotes` does not cut it (MRPC report seed 109)."""
    return (said_already(split_quotes(rule)[0], [split_quotes(x)[0] for x in earlier])
            or adds_no_word(rule, earlier))


# words that carry no condition of a rule: articles, pronouns, auxiliaries, prepositions, and the
# filler a small model wraps a restated rule in ("make sure", "please"). Words of logic ("not",
# "never", "only", "unless", "same", "both") are not here: they are what a new rule changes
FILLER = frozenset(_stem(w) for w in """a an the this that these those it its they them their there here
    and or but if then so as of to in on at by for with from into about is are be been being was were
    do does did have has had can could should would will shall may might must agent you your make sure please
    when whenever while which who what how e g eg""".split())


def adds_no_word(text: str, said: Sequence[str]) -> bool:
    """Every word of the text that is not `FILLER` is in one of `said`: the same words rearranged. In
    a 3-epoch MRPC run (report seed 109) the 1.5B restated the accepted label rule four times in
    other word orders ("If the two sentences provide the same information, then the agent should
    answer 'equivalent'..."), out of reach of the word triples, and the gate spent 182 validation
    rollouts on them. A rule with one word of its own ("... when one sentence states something the
    other does not") is new."""
    own = {w for w in _words(text) if w not in FILLER}
    return bool(own) and any(own <= set(_words(x)) for x in said if x.strip())


def said_already(text: str, said: Sequence[str]) -> bool:
    """Most of the text's word triples (`REPEAT_SHARE`) are in one of `said`: a passage that says
    what one of them says. At step 3 of a 3-epoch RTE run the 1.5B's reflection added the seed's own
    sentence with the description's ending ("Read the task, reason briefly, then give the final
    answer in the requested format."), and the gate spent a decision on it."""
    n = min(3, len(_words(text)))
    grams = word_grams(text, n) if n else set()
    return bool(grams) and any(len(grams & word_grams(x, n)) >= REPEAT_SHARE * len(grams) for x in said)


def with_examples(rule: str, failures: Sequence[ScoredRollout], n: int, starts: bool = False,
                  labels: Sequence[str] = ()) -> str:
    """The rule followed by up to `n` of its train failures' answers, expected beside written: a small
    target follows a convention it is shown far more often than one it is only told (the answers are
    train labels, never validation or test text). Only short answers that differ in form are quoted,
    except for a `no-label` cluster (`starts`), where the written answer was a sentence and the data
    wants one of its labels: that is the difference to show (seen on MRPC: told to answer
    'equivalent', the target wrote the label on one line and a sentence on its answer line); and so
    for a `long-answer` cluster, whose short expected answers stand beside the sentences written.
    A failure that wrote one of the data's closed `labels` for another is no difference of form
    ("'entailment', not 'not_entailment'" is one train task's answer, not a convention): never quoted."""
    pairs = _label_pairs(failures) if starts else _form_pairs(failures, labels)
    pairs = list(dict.fromkeys(pairs))[:n]
    return f"{rule.rstrip()}{EXAMPLES}{'; '.join(pairs)}." if pairs else rule


def _form_pairs(failures: Sequence[ScoredRollout], labels: Sequence[str] = ()) -> list[str]:
    pairs, closed = [], {normalize_answer(label) for label in labels}
    for r in failures:
        got, exp = stated_answer(r.output).strip(), first_answer(r)
        if normalize_answer(got) in closed:  # a label written for another label: another answer, not a form
            continue
        g, e = normalize_answer(got).split(), normalize_answer(exp).split()  # words and numbers: what they share
        # two numbers that differ once normalized are two answers ('40', not '30' teaches nothing)
        same_kind = bool(set(g) & set(e)) and not (is_numeric(" ".join(g)) and is_numeric(" ".join(e)))
        if (g and e and len(g) <= 8 and len(e) <= 8 and same_kind
                and normalize_text(got) != normalize_text(exp) and "'" not in got + exp):
            pairs.append(f"'{exp}', not '{got}'")  # a difference of form, not another answer altogether
    return pairs


def _label_pairs(failures: Sequence[ScoredRollout]) -> list[str]:
    """One pair per answer the failures expected (a label, or a short phrase): it beside the start of
    what was written."""
    by_label: dict[str, str] = {}
    for r in failures:
        got, exp = stated_answer(r.output).split(), first_answer(r)
        start = " ".join(got[:LABEL_QUOTE_WORDS]) + ("..." if len(got) > LABEL_QUOTE_WORDS else "")
        if got and exp and exp not in by_label and "'" not in start + exp:
            by_label[exp] = start
    return [f"'{exp}', not '{got}'" for exp, got in by_label.items()]


def _window(failures: Sequence[ScoredRollout], k: int) -> list[ScoredRollout]:
    """The `k`-th window of `SHOWN_FAILURES` failures (wrapping around)."""
    if len(failures) <= SHOWN_FAILURES:
        return list(failures)
    start = (k * SHOWN_FAILURES) % len(failures)
    return [failures[(start + i) % len(failures)] for i in range(SHOWN_FAILURES)]
