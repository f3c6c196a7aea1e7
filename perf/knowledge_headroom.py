"""How far a skill's text can move the embedded 1.5B target on the knowledge and conventions families.

The development suite (perf/suite.py) has families whose score turns on a convention of the
data the prompt never states: squad, jeopardy, naturalqs and boolq (FAMILIES there says why each),
and mbpp-bash, whose checks read what a bash function prints in forms the task never names; and
math-prealgebra and mbpp, a reasoning and a code family where no edit was accepted. This script
asks whether the best text an optimizer could write would move local:qwen2.5-coder-1.5b there at
all. Per family and split seed, with the quick preset's split sizes and answer length, it
scores on the val and test splits (both development data for split seeds 0-4) three skills:

- `seed`: the seed skill the quick preset uses for the family (skills/default/SKILL.md: none of
  the three ships its own);
- `rule`: the seed plus a `## Rules` section with one rule that states the family's hidden
  convention as a person who has read the data would write it (RULES below, hand-written: the
  oracle of what a rule edit could say);
- `examples`: the seed plus a section with the first 4 train tasks of the split, each its question
  (no passage, no answer-format line) and `Answer: <first expected answer>` (train tasks only); for
  a code family, the task's description and test line and its reference function in a code block.

New sections go before the seed's first protected block ("Answer format", "Code format"), which
stays as it is. Each skill is scored by the real CLI (`skillopt eval`), one run at a time, in the
work folder; per-task hard scores come from each run's rollouts, errored (infrastructure) rollouts
left out of both sides.
The rule and examples skills are paired against the seed on the same tasks with `stats.paired_lift`,
the interval `skillopt compare` shows.

It writes perf/results/knowledge_headroom.json: per family and variant, the added section, hard
score and n, and for rule and examples the paired difference with its 95% interval, tasks won and
lost, and which ones, and what the gate decides on the validation pairs.

With `--learned`, the question is the one a 3-epoch run asks after its first accepted edit: is
there a second edit this target gains from? The skills scored are then `learned`, the best skill
of the suite's 3-epoch `ours` row for the family and split seed (perf/results/suite.json), and
`second-rule`, that skill with one more bullet in its `## Rules` section (SECOND_RULES below,
hand-written the same way, from the failures the learned skill still makes).

`--max-tokens N` scores every skill with a reply cap of N tokens instead of the quick preset's 320
(math-prealgebra's own is 512: a reply that works first runs past 320 on a quarter of its tasks);
each row counts the replies that reached the cap (`capped`).

Usage: python perf/knowledge_headroom.py [--families squad,jeopardy,naturalqs] [--seed 0] [--splits val,test]
                                         [--variants rule,examples] [--learned] [--max-tokens N]
                                         [--out NAME] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from perf.common import commit, machine, skillopt, stop_runs_on_sigterm, uptime, write_result  # noqa: E402
from skillopt.benchmarks import get_benchmark  # noqa: E402
from skillopt.benchmarks.code import reference_code  # noqa: E402
from skillopt.benchmarks.qa import ANSWER_FORMAT  # noqa: E402
from skillopt.config import PRESETS, RunConfig, resolve_config  # noqa: E402
from skillopt.engine.gating import gate_test  # noqa: E402
from skillopt.engine.setup import seed_skill  # noqa: E402
from skillopt.optimizer.sequential_test import SequentialGate  # noqa: E402
from skillopt.skill import Skill  # noqa: E402
from skillopt.stats import paired_lift  # noqa: E402
from skillopt.store.run_store import RunStore  # noqa: E402
from skillopt.store.scores import per_task  # noqa: E402

TARGET = "local:qwen2.5-coder-1.5b"
EXAMPLES = 4  # train tasks shown by the `examples` skill
PROTECTED = "<!-- skillopt:protected -->"

# hand-written: each family's convention as a person who has read its expected answers would state it
RULES = {
    "squad": "The answer is the shortest span of the passage that answers the question, copied word for word "
             "as the passage writes it (numbers and dates exactly as the passage writes them): a name, a date, "
             "a number or a short phrase, never a sentence and never your own words.",
    "jeopardy": "The answer is the bare thing the clue describes: a name or a noun phrase only, with no "
                "\"What is\" or \"Who is\" before it and never a sentence.",
    "naturalqs": "The answer is a short entity in its usual form: a name, a date, a number or a title, as an "
                 "encyclopedia would write it; never a sentence or an explanation.",
    "boolq": "The answer is the one word yes or no, as the passage decides it: never a sentence or an explanation.",
    "rte": "Answer with one of the two labels: entailment (the premise shows the hypothesis is true) or "
           "not_entailment (it does not).",
    # the procedure the reasoning families turn on (what the `working-first` template and a worked example
    # teach), with the answer's form: every expected answer is an integer or a decimal
    "math-prealgebra": "Work the problem before you answer: write what is given, then each computation on its own "
                       "line, and check it; only then give the answer line. The answer is one plain number, an "
                       "integer or a decimal: no unit, no percent or dollar sign, no words.",
    # read off the seed's 21 failed checks on the 40 validation tasks of development split seed 0: no convention
    # recurs (each failure is the task's own algorithm or reading: a formula, an off-by-one, a string worded
    # differently from the test's), so the rule is the one check a person would ask of every reply; scored
    # on the test split only (`--splits test`), which was not read
    "mbpp": "The test shown is the specification. Before you write the function, work out by hand what it must "
            "return for the shown call, and make sure your function returns exactly that: the same value, type "
            "and text, character for character. Where the description could be read two ways, take the reading "
            "the shown call's result fits.",
    # read off the seed's failed checks on development split seed 0: replies that were the file name alone,
    # functions that returned their result as an exit status, yes/no results printed as 0/1 or nothing, and
    # decimals in bash's whole-number `$(( ))` ("syntax error: invalid arithmetic operator")
    "mbpp-bash": "The checks run the function and read what it prints: print the result with echo, never only "
                 "return it as an exit status, and print nothing else. Print a yes/no result as the word true or "
                 "false. Bash's $(( )) does whole numbers only: compute decimals with awk or bc -l and print them "
                 "in full, not rounded. Write the whole function in the ```bash block, never only the file name.",
}


# hand-written: what the data's labels turn on, read off the failures left under the learned label rule
# (development split seed 2): pairs labelled not_equivalent / not_entailment the target gave the
# other label, where one sentence holds a fact the other lacks
SECOND_RULES = {
    "mrpc": "Answer 'not_equivalent' when one sentence states something the other does not: a number, a name, a "
            "quote, a reason or an extra clause. Answer 'equivalent' only when both sentences state the same facts "
            "in other words.",
    "rte": "Answer 'entailment' only when the premise itself states every fact of the hypothesis; when the "
           "hypothesis adds a fact, a number, a name or a claim the premise does not state, answer 'not_entailment'.",
}


def learned_skill(family: str, seed: int) -> Skill:
    """The best skill of the suite's 3-epoch `ours` row for the family and split seed."""
    rows = json.loads((REPO / "perf" / "results" / "suite.json").read_text())["runs"]
    found = [r for r in rows if r["family"] == family and r["split_seed"] == seed and r["arm"] == "ours"
             and r.get("accumulate")]
    if not found:
        raise SystemExit(f"perf/results/suite.json has no 3-epoch row for {family} split seed {seed}: "
                         f"run `python perf/suite.py --families {family} --seeds {seed} --accumulate` first")
    return Skill.parse(found[-1]["best_skill"])


def with_bullet(skill: Skill, rule: str) -> Skill:
    """`skill` with `rule` as the last bullet of its `## Rules` section (where the rules proposer puts one)."""
    at = skill.body.find("\n## Rules\n")
    if at < 0:
        raise SystemExit(f"the skill {skill.name!r} has no '## Rules' section to add a rule to")
    end = skill.body.find("\n## ", at + 1)
    end = len(skill.body) if end < 0 else end
    section = skill.body[at:end].rstrip("\n")
    return skill.with_body(f"{skill.body[:at]}{section}\n- {rule}\n{skill.body[end:]}")


def preset_config(family: str, seed: int, max_tokens: int | None = None) -> RunConfig:
    """The quick preset's settings with the family and split seed (as perf/suite.py resolves them), and
    the reply cap when one is given instead of the preset's."""
    layer: dict = {"benchmark": family, "splits": {"seed": seed}}
    if max_tokens:
        layer["limits"] = {"max_tokens": max_tokens}
    return resolve_config(PRESETS["quick"], layer)


def question_of(task, family: str) -> str:
    """The prompt without the benchmark's answer-format line, and without the passage before the question
    (squad, boolq); a code task's without its last paragraph (where to write the code)."""
    if is_code(task):
        return task.prompt.strip().rpartition("\n\n")[0]
    text = task.prompt.removesuffix(ANSWER_FORMAT[task.metadata["scorer"]]).strip()
    return text.rpartition("\n\n")[2].strip() if text.startswith("Context:\n") else text


def is_code(task) -> bool:
    """A task checked by running code: it has no reference answer (as the rules proposer tells them)."""
    return not task.reference.strip()


def with_section(seed: Skill, section: str) -> Skill:
    """The seed skill with `section` inserted before the heading of its first protected block."""
    protected = seed.body.find(PROTECTED)
    at = seed.body.rfind("\n## ", 0, protected) + 1 if protected >= 0 else 0
    if at <= 0:
        raise SystemExit(f"the seed skill {seed.name!r} has no protected section to insert before")
    return seed.with_body(f"{seed.body[:at]}{section.strip()}\n\n{seed.body[at:]}")


def sections(family: str, cfg: RunConfig) -> dict[str, str]:
    """The section each variant adds to the seed skill ("" for the seed itself)."""
    train = list(get_benchmark(family, cfg.splits).tasks("train"))[:EXAMPLES]
    if train and is_code(train[0]):  # the reference functions
        lang = "bash" if family.endswith("bash") else "python"
        heading, shown = "Examples of solved tasks", [f"{question_of(t, family)}\n\n```{lang}\n"
                                                       f"{reference_code(t).strip()}\n```" for t in train]
    else:
        heading, shown = "Examples of expected answers", [f"{question_of(t, family)}\nAnswer: {t.answers[0]}"
                                                           for t in train]
    return {"seed": "", "rule": f"## Rules\n- {RULES[family]}", "examples": f"## {heading}\n\n" + "\n\n".join(shown)}


def eval_argv(skill_file: Path, family: str, split: str, cfg: RunConfig) -> list[str]:
    s = cfg.splits
    sets = [f"splits.seed={s.seed}", f"splits.train={s.train}", f"splits.val={s.val}", f"splits.test={s.test}",
            f"limits.max_tokens={cfg.limits.max_tokens}"]
    return skillopt("eval", "--skill", str(skill_file), "-b", family, "--split", split, "--target-model", TARGET,
                    *[x for s in sets for x in ("--set", s)], "--progress", "none")


def score(skill_file: Path, family: str, split: str, cfg: RunConfig, work: Path) -> dict:
    """One `skillopt eval` run: per-task hard scores (errored rollouts left out) and what it cost."""
    def run_folders() -> set[Path]:
        return {p for p in (work / "runs").glob("*") if p.is_dir()}

    before, argv = run_folders(), eval_argv(skill_file, family, split, cfg)
    t0 = time.perf_counter()
    done = subprocess.run(argv, cwd=work, capture_output=True, text=True)  # Ctrl-C / SIGTERM kill it too
    wall = time.perf_counter() - t0
    made = sorted(run_folders() - before)
    if done.returncode != 0 or len(made) != 1:
        raise SystemExit(f"skillopt eval failed (rc {done.returncode}, {len(made)} new runs): "
                         f"{(done.stderr or done.stdout)[-1500:]}")
    records = RunStore(made[0]).rollouts()
    return {"hard": per_task(records, "hard"), "errored": sum(r.errored for r in records),
            "capped": sum(not r.errored and r.output_tokens >= cfg.limits.max_tokens for r in records),
            "run_id": made[0].name, "wall_s": round(wall, 1), "argv": argv[1:]}


def family_rows(family: str, seed: int, splits: list[str], work: Path, variants: list[str],
                learned: bool = False, max_tokens: int | None = None) -> list[dict]:
    cfg = preset_config(family, seed, max_tokens)
    if learned:
        base = learned_skill(family, seed)
        made = {"learned": base, "second-rule": with_bullet(base, SECOND_RULES[family])}
        added = {"learned": "", "second-rule": f"- {SECOND_RULES[family]}"}
        variants = list(made)
    else:
        base = seed_skill(cfg)
        added = sections(family, cfg)
        made = {v: with_section(base, x) if x else base for v, x in added.items()}
    rows, seed_hard = [], {}
    for variant, section in added.items():
        if variant not in variants:
            continue
        skill = made[variant]
        path = work / "skills" / f"{family}-{seed}" / variant / "SKILL.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(skill.render())
        runs = [score(path, family, split, cfg, work) for split in splits]
        hard = {t: v for r in runs for t, v in r["hard"].items()}
        row = {"family": family, "split_seed": seed, "splits": splits, "variant": variant, "skill_text": section,
               "max_tokens": cfg.limits.max_tokens, "capped": sum(r["capped"] for r in runs),
               "hard": round(sum(hard.values()) / len(hard), 4) if hard else None, "n": len(hard),
               "errored": sum(r["errored"] for r in runs), "runs": [r["run_id"] for r in runs],
               "wall_s": round(sum(r["wall_s"] for r in runs), 1), "eval_argv": runs[0]["argv"]}
        if variant in ("seed", "learned"):
            seed_hard = hard
        else:
            row.update(against(seed_hard, hard, family, cfg, splits))
        rows.append(row)
        print(f"{family} {variant}: hard {row['hard']} n={row['n']} errored={row['errored']} "
              f"{row.get('delta', '')} [{row.get('ci_low', '')}, {row.get('ci_high', '')}]", flush=True)
    return rows


def against(base: dict[str, float], variant: dict[str, float], family: str, cfg: RunConfig, splits: list[str]) -> dict:
    """The variant paired against the base on their common tasks, and the gate's verdict when
    validation tasks were scored."""
    out = versus_seed(base, variant)
    if "val" in splits:
        out.update(gate_verdict(base, variant, family, cfg))
    return out


def gate_verdict(seed: dict[str, float], variant: dict[str, float], family: str, cfg: RunConfig) -> dict:
    """What the gate, set as a run of the quick preset sets it (its validation size, bounds and its
    share of a step's error rate), decides for the variant against the seed on the validation pairs in
    the order a run feeds them: whether an optimizer that wrote this text would have had it accepted."""
    gate = SequentialGate(gate_test(cfg.gate, cfg.splits.val, share=cfg.gate.per_step))
    for task in get_benchmark(family, cfg.splits).tasks("val"):
        if task.id in seed and task.id in variant:
            gate.add(task.id, seed[task.id], variant[task.id])
        else:  # errored on either side
            gate.skip(task.id)
    accepted, stop, reason = gate.final()
    return {"gate_accepted": accepted, "gate_stop": stop, "gate_pairs": len(gate.pairs), "gate_reason": reason}


def versus_seed(seed: dict[str, float], variant: dict[str, float]) -> dict:
    """The variant minus the seed on the tasks both scored (`stats.paired_lift`, as `skillopt compare`)."""
    lift = paired_lift(seed, variant)
    if lift is None:
        return {"delta": None, "paired_n": 0}
    i = lift.interval
    common = sorted(t for t in seed if t in variant)
    return {"delta": round(i.mean, 4), "ci_low": round(i.lo, 4), "ci_high": round(i.hi, 4), "ci_method": i.method,
            "won": lift.wins, "lost": lift.losses, "tied": lift.ties, "paired_n": lift.n, "verdict": lift.verdict,
            "won_tasks": [t for t in common if variant[t] > seed[t]],
            "lost_tasks": [t for t in common if variant[t] < seed[t]]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--families", default="squad,jeopardy,naturalqs")
    ap.add_argument("--seed", type=int, default=0, help="split seed")
    ap.add_argument("--splits", default="val,test", help="the splits scored (paired over their union)")
    ap.add_argument("--variants", default="rule,examples", help="which additions to score beside the seed")
    ap.add_argument("--work", help="folder for the skills and runs (default: a new temporary folder)")
    ap.add_argument("--out", default="knowledge_headroom", help="result name under perf/results/")
    ap.add_argument("--max-tokens", type=int, help="the reply cap (default: the quick preset's, 320)")
    ap.add_argument("--learned", action="store_true",
                    help="score a second hand-written rule beside the best skill of the suite's 3-epoch row")
    args = ap.parse_args()
    stop_runs_on_sigterm()
    families, splits = args.families.split(","), args.splits.split(",")
    rules = SECOND_RULES if args.learned else RULES
    unknown = [f for f in families if f not in rules]
    if unknown:
        raise SystemExit(f"no rule for {unknown}: known families are {sorted(rules)}")
    work = Path(args.work or tempfile.mkdtemp(prefix="knowledge-headroom-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    variants = ["seed", *args.variants.split(",")]
    measure(args.out, work, lambda: [row for family in families
                                     for row in family_rows(family, args.seed, splits, work, variants, args.learned,
                                                                 args.max_tokens)])


def measure(out: str, work: Path, rows: Callable[[], list[dict]]) -> None:
    """Make the rows and write them as perf/results/`out`.json, with the commit of the code measured
    (skillopt/ and skills/), the machine, its load before and after, and the command."""
    head, clean = commit(paths=("skillopt", "skills"))
    t0, at_start = time.perf_counter(), uptime()
    made = rows()
    doc = {"machine": machine(), "uptime_at_start": at_start, "uptime_at_end": uptime(),
           "command": f"python perf/{Path(sys.argv[0]).name} " + " ".join(sys.argv[1:]),
           "commit": head, "code_clean": clean, "target": TARGET, "work": str(work),
           "wall_s": round(time.perf_counter() - t0, 1), "rows": made}
    print(f"wrote {write_result(out, doc)}")


if __name__ == "__main__":
    main()
