"""Regenerate the README's measured sections from perf/results/*.json.

Two blocks of README.md are rewritten from the result files: between `<!-- perf:begin -->` and
`<!-- perf:end -->` the performance figures (peers.json, scale.json, local_model.json,
ray_scaling.json), between `<!-- quality:begin -->` and `<!-- quality:end -->` the learning figures
(quality.json, gate_sim.json), between `<!-- suite:begin -->` and `<!-- suite:end -->` the development
suite (suite.json, perf/readme_suite.py), between `<!-- agents:begin -->` and `<!-- agents:end -->` the
agent harnesses (agents.json, perf/readme_agents.py), between `<!-- quicktime:begin -->` and
`<!-- quicktime:end -->` how long the main job takes (quick_time.json, local_model.json; requant.json
goes with the embedded model's figures). A file that is missing leaves its part out. `--check` exits 1 when
the README is not what the results give (nothing is written).

Usage: python perf/readme.py [--check]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "perf"))
RESULTS = REPO / "perf" / "results"
TOOLS = {"skillopt": "skillopt", "microsoft-skillopt": "microsoft/SkillOpt 0.2.0", "gepa": "GEPA 0.1.4"}


def load(name: str) -> dict | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def num(x, unit: str = "", digits: int = 1) -> str:
    if x is None:
        return "-"
    if isinstance(x, (int, float)) and abs(x) >= 1000 and digits <= 1:
        return f"{x:,.0f}{unit}"
    return f"{x:.{digits}f}{unit}"


def machine_line(doc: dict, load_key: str = "load_avg_during") -> str:
    m = doc["machine"]
    loads = doc.get(load_key) or [m.get("load_avg_1_5_15"), doc.get("machine_after")]
    loads = [x for x in loads if x]
    ones = [x[0] for x in loads if x]
    load = f"1-min load average {min(ones):.1f}-{max(ones):.1f}" if ones else ""
    return (f"{m.get('cpus')} CPUs ({m.get('cpu', '')}), {m.get('memory_gib')} GiB, Python {m.get('python')}, "
            f"{m.get('date')}; {load} (the CPUs are shared with other work: wall times swing, ratios and CPU "
            f"times are steadier)")


def table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


def spread(runs: list[dict], key: str, digits: int = 1, unit: str = "") -> str:
    vals = [r[key] for r in runs if r.get(key) is not None]
    if not vals:
        return "-"
    lo, hi = min(vals), max(vals)
    return num(lo, unit, digits) if len(vals) == 1 or num(lo, "", digits) == num(hi, "", digits) \
        else f"{num(lo, '', digits)}-{num(hi, unit, digits)}"


def peers_part(doc: dict) -> list[str]:
    out = ["### Against the peers", "",
           f"`{doc['command']}`: every tool in turn, {len(doc['load_avg_during'])} repeats, against one instant model "
           f"server, `{doc['server'].split(' ')[0]}`. Ranges over the repeats. {machine_line(doc)}.", ""]
    if by_part := doc.get("load_by_part"):
        out += ["When each part was measured (1-min load averages recorded): " + "; ".join(
            f"{part} {v['date']}, {min(x[0] for x in v['loads']):.1f}-{max(x[0] for x in v['loads']):.1f}"
            for part, v in by_part.items() if v.get("loads")) + ".", ""]
    for what, runs in doc["runs"].items():
        if not what.startswith("eval_"):
            continue
        n, conc = what.removeprefix("eval_").split("_c")
        out += [f"An evaluation of {int(n):,} QA items at concurrency {conc}:", ""]
        rows = [
            ["framework overhead per rollout (wall time / rollouts)"] + [spread(runs[t], "overhead_ms_per_rollout", 1, " ms") for t in TOOLS],
            ["rollouts/s, first call to last call"] + [spread(runs[t], "rollouts_per_s", 0) for t in TOOLS],
            ["launch to first call"] + [spread(runs[t], "start_to_first_call_s", 2, " s") for t in TOOLS],
            ["last call to exit"] + [spread(runs[t], "last_call_to_exit_s", 2, " s") for t in TOOLS],
            ["CPU time of the process"] + [spread(runs[t], "cpu_s", 2, " s") for t in TOOLS],
            ["peak memory (RSS)"] + [spread(runs[t], "peak_rss_mib", 0, " MiB") for t in TOOLS],
        ]
        out += table([""] + list(TOOLS.values()), rows) + [""]
        r = doc["summary"][what]["ratios"]
        out += [f"skillopt's rollouts/s (medians): {r.get('rollouts_per_s_vs_microsoft-skillopt')}x microsoft/SkillOpt's, "
                f"{r.get('rollouts_per_s_vs_gepa')}x GEPA's.", ""]
    if "process_start" in doc["runs"]:
        runs = doc["runs"]["process_start"]
        out += ["Process start (`skillopt --version`; `python -m scripts.train --help`; `python -c \"import gepa, "
                "litellm\"`): " + ", ".join(f"{TOOLS[t]} {spread(runs[t], 'wall_s', 2, ' s')}" for t in TOOLS) + ".", ""]
    if "optimise_2_steps" in doc["runs"]:
        runs = doc["runs"]["optimise_2_steps"]
        rows = [["accept/reject decisions"] + [spread(runs[t], "decisions", 0) for t in TOOLS],
                ["target calls per decision"] + [spread(runs[t], "target_calls_per_decision", 1) for t in TOOLS],
                ["optimizer calls per decision"] + [spread(runs[t], "optimizer_calls_per_decision", 1) for t in TOOLS],
                ["wall time"] + [spread(runs[t], "wall_s", 2, " s") for t in TOOLS]]
        out += ["A 2-step optimisation (8 train items, 20 val items, minibatches of 4; calls counted at the server):", ""]
        out += table([""] + list(TOOLS.values()), rows) + [""]
    out += ["microsoft/SkillOpt 0.2.0's wheel ships none of its prompt files, so none of its environments can "
            "start as installed. `perf/peers.py` writes exactly these into its installed package, and nothing else: "
            + ", ".join(f"`skillopt/{f}`" for f in doc.get("supplied_to_microsoft_skillopt", []))
            + " (a one-line rollout prompt with the `{skill_section}` slot its code fills, and one generic optimizer "
              "instruction in each of the four others). It runs its `searchqa` QA environment through "
              "`scripts.eval_only` / `scripts.train` with `azure_openai_auth_mode: openai_compatible` pointed at the "
              "server. GEPA runs its `DefaultAdapter` and `gepa.optimize` (LiteLLM, with "
              "`LITELLM_LOCAL_MODEL_COST_MAP=True` offline); see `perf/peer_drivers/gepa_driver.py`.", ""]
    return out


def scale_part(doc: dict) -> list[str]:
    out = ["### Scale", "", f"`{doc['command']}`: runs whose baseline evaluation scores N val tasks at concurrency "
           f"{doc['sizes'][0]['concurrency']}, against the instant server. {machine_line(doc, 'x')}.", ""]
    rows = []
    for s in doc["sizes"]:
        rd = s["run_dir"]
        rows.append([f"{s['rollouts']:,}", num(s["wall_s"], " s", 1), num(s["overhead_ms_per_rollout"], " ms", 2),
                     num(s["cpu_ms_per_rollout"], " ms", 2), num(s["rollouts_per_s"], "", 0),
                     num(s["start_to_first_call_s"], " s", 2), num(s["last_call_to_exit_s"], " s", 2),
                     num(s["peak_rss_mib"], " MiB", 0), f"{rd['disk_bytes'] / 2**20:,.0f} MiB ({rd['files']:,} files)"])
    out += table(["rollouts", "wall", "wall per rollout", "CPU per rollout", "rollouts/s", "launch to first call",
                  "last call to exit", "peak RSS", "run folder on disk"], rows) + [""]
    r = doc.get("readers")
    if r:
        out += [f"Reading the {r['rollouts']:,}-rollout run (wall / CPU): "
                + ", ".join(f"`{name.replace('_', ' ')}` {num(v['wall_s'], ' s', 1)} / {num(v['cpu_s'], ' s', 1)}"
                            for name, v in r.items() if isinstance(v, dict)) + ". `runs show`, `report` and `compare` "
                "select the rollouts they need from the SQLite index instead of parsing rollouts.jsonl; resuming "
                "parses it (the rollout cache)." , ""]
    rl = doc.get("runs_list")
    if rl:
        out += [f"`runs list` over {rl['runs']:,} runs: {num(rl['with_index']['wall_s'], ' s', 2)} with the index, "
                f"{num(rl['without_index']['wall_s'], ' s', 2)} reading every run folder.", ""]
    return out


BEFORE, NOW = "before issue 12", "now"  # label prefixes of perf/local_model.py's SETTINGS


def serving_ratio(runs: list[dict], before: str = BEFORE) -> tuple[float, float, float] | None:
    """(now, before, now/before): median rollouts/min of the settings labelled so."""
    by = {}
    for r in runs:
        by.setdefault(r["settings"].split(" (")[0], []).append(r["rollouts_per_min"])
    if before in by and NOW in by:
        now, then = statistics.median(by[NOW]), statistics.median(by[before])
        return now, then, now / then
    return None


def local_part(doc: dict) -> list[str]:
    out = ["### The embedded model", ""]
    serving = doc.get("serving")
    if serving:
        out += [f"`{serving['command']}`: the quick preset's rollouts (its first {serving['tasks']} test tasks with "
                f"the seed skill, as the chat harness sends them, temperature 0) through one qwen2.5-coder-0.5b server "
                f"per measurement, {serving['concurrency']} in flight, the server settings interleaved; then 16 of "
                f"them with replies of exactly 128 tokens (a generation-bound load). {machine_line(serving, 'x')}.", ""]
        rows = []
        for kind, runs in serving["runs"].items():
            labels = list(dict.fromkeys(r["settings"] for r in runs))
            for label in labels:
                mine = [r for r in runs if r["settings"] == label]
                rows.append([kind, label, spread(mine, "rollouts_per_min", 1),
                             num(statistics.median(r["prompt_tokens_mean"] for r in mine), "", 0),
                             num(statistics.median(r["generated_tokens_mean"] for r in mine), "", 0)])
        out += table(["load", "server settings", "rollouts/min", "new prompt tokens", "generated tokens"], rows) + [""]
        for kind, runs in serving["runs"].items():
            if (r := serving_ratio(runs)):
                out.append(f"- {kind}: now / before issue 12: {r[2]:.2f}x ({r[0]:.1f} against {r[1]:.1f} rollouts/min).")
        out += ["", "The preset's replies are ~8 tokens after ~90 new prompt tokens (the skill prefix is cached): the "
                "work is prompt processing, which batching the decoding of several sequences does not shorten. "
                "Every setting lands within about 60-80 rollouts/min, one request at a time on every CPU included: "
                "this CPU's prompt throughput bounds the load, and 2x the settings from before the issue would need "
                "it twice as fast. Where replies are long, decoding the slots together is what pays.", ""]
    out += limit_part(doc.get("limit"))
    out += requant_part(load("requant"))
    for r in doc.get("results", []):
        pc = r.get("prefix_cache", {})
        out += [f"- {r['model']}: server start {r['server_start_s']} s, prompt {r['prompt_tok_s']} tok/s, generation "
                f"{r['gen_tok_s']} tok/s; the same skill prefix on the next task: {pc.get('prompt_ms_mean')} ms instead "
                f"of {r['cold_prompt_ms']} ms; {r['concurrent_requests']} requests at once: "
                f"{r['concurrent_gen_tok_s']} generated tok/s."]
    return out


def ray_part(doc: dict) -> list[str]:
    rows = [[f"{n} worker node{'s' if n > 1 else ''}", spread(doc["runs"][str(n)], "rollouts_per_s", 1),
             num(doc[key], "", 1), spread(doc["runs"][str(n)], "wall_s", 1, " s")]
            for n, key in ((1, "one_node_rollouts_per_s"), (2, "two_nodes_rollouts_per_s"))]
    return ["### On a Ray cluster", "",
            f"`{doc.get('command', 'python perf/ray_scaling.py')}`: `skillopt eval --executor ray` of {doc['tasks']} QA "
            f"tasks, {doc['concurrency']} rollouts in flight, against a fake model server that answers each call in "
            f"{doc['fake_server_delay_s'] * 1000:.0f} ms. A head node (the driver's, no rollout slots) and two worker "
            f"nodes of {doc['slots_per_node']} rollout slots each, started with `ray start` on this machine in a "
            f"loopback-only network namespace; \"1 worker node\" pins the rollouts to the first with a custom "
            f"resource. Steady-state rollouts/s (the first {doc['concurrency']} completions left out), "
            f"{doc['repeats']} alternating repeats{f', at nice {nice}' if (nice := doc.get('niceness')) else ''}; the "
            f"wall time also holds the start (connecting, the probe, Ray's worker processes). "
            f"{machine_line(doc, 'x')}.", ""] + \
        table(["", "rollouts/s (repeats)", "median", "wall of the eval"], rows) + \
        ["", f"2 nodes / 1 node: {doc['ratio']:.2f}x (a node's ideal: {doc['ideal_rollouts_per_s_per_node']:g} "
             f"rollouts/s, its slots / 200 ms). Both nodes share this machine's 2 CPUs with the driver and the "
             f"server, so this measures the executor's scheduling, not more hardware.", ""]


def goals_part(peers: dict | None, scale: dict | None, local: dict | None, ray: dict | None = None) -> list[str]:
    """The issue's goal figures, each with whether this machine met it (medians)."""
    out = ["### The goals, as measured here", ""]
    if peers and "eval_1000_c64" in peers.get("summary", {}):
        med = peers["summary"]["eval_1000_c64"]["median"]["skillopt"]
        runs = peers["runs"]["eval_1000_c64"]["skillopt"]
        cpu = statistics.median(r["cpu_s"] for r in runs) * 1000 / 1000
        met = "met" if med["overhead_ms_per_rollout"] <= 2 else "not met on wall time"
        out.append(f"- Framework overhead at most 2 ms per rollout at 1,000 tasks and concurrency 64: "
                   f"{med['overhead_ms_per_rollout']:.2f} ms of wall time per rollout (launch to exit, median; "
                   f"{min(r['overhead_ms_per_rollout'] for r in runs):.2f} ms at best), {cpu:.2f} ms of CPU: "
                   f"{met} on this shared machine; CPU time per rollout is within it.")
        r = [peers["summary"][k]["ratios"].get("rollouts_per_s_vs_microsoft-skillopt")
             for k in ("eval_200_c8", "eval_1000_c64") if k in peers["summary"]]
        out.append(f"- At least 3x microsoft/SkillOpt 0.2.0's rollouts per second: {' and '.join(f'{x}x' for x in r)} "
                   f"(200 items at concurrency 8, 1,000 at 64): {'met' if all(x >= 3 for x in r) else 'not met'}.")
    if scale and len(scale.get("sizes", [])) >= 2:
        a, b = scale["sizes"][-2], scale["sizes"][-1]
        out.append(f"- Run time and memory linear up to {b['rollouts']:,} rollouts: CPU per rollout "
                   f"{a['cpu_ms_per_rollout']:.2f} ms at {a['rollouts']:,} and {b['cpu_ms_per_rollout']:.2f} ms at "
                   f"{b['rollouts']:,}; peak RSS {a['peak_rss_mib']:.0f} -> {b['peak_rss_mib']:.0f} MiB "
                   f"({b['peak_rss_mib'] / a['peak_rss_mib']:.1f}x for {b['rollouts'] / a['rollouts']:.0f}x the rollouts): met.")
    if local and (serving := local.get("serving")):
        loads = list(serving["runs"].values())
        if (r := serving_ratio(loads[0])):
            more = [f"{x[2]:.2f}x on replies of 128 tokens" for x in [serving_ratio(loads[-1])] if x and len(loads) > 1]
            more += [f"{x[2]:.2f}x the last stop's settings" for x in [serving_ratio(loads[0], "last stop")] if x]
            out.append(f"- The embedded model serving the quick preset at 2x today's rollouts per minute: {r[2]:.2f}x "
                       f"({r[0]:.1f} against {r[1]:.1f} rollouts/min with the server settings from before the issue, "
                       f"medians; {', '.join(more)}): {'met' if r[2] >= 2 else 'not met'}.")
    if ray:
        out.append(f"- On 2 Ray worker nodes against a 200 ms fake server, at least 1.8x the rollouts/s of 1 node: "
                   f"{ray['ratio']:.2f}x ({ray['two_nodes_rollouts_per_s']:.1f} against "
                   f"{ray['one_node_rollouts_per_s']:.1f} rollouts/s, medians of {ray['repeats']}): "
                   f"{'met' if ray['ratio'] >= 1.8 else 'not met'}.")
    return out + [""]


GENERATED = "<!-- generated by `python perf/readme.py` from perf/results/*.json: edit those, not this -->"


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def gate_part(sim: dict) -> list[str]:
    rows = [[s["scenario"], f"{s['effect']:+.2f}", f"{s['tasks']}", pct(s["accept_rate"]),
             f"{s['pairs_per_decision']:.1f}", f"{s['rollouts_per_decision']:.1f} of {s['full_split_rollouts']}"]
            for s in sim["scenarios"]]
    st = sim["settings"]
    rate = {s["scenario"]: s["accept_rate"] for s in sim["scenarios"]}
    return ["### The gate, simulated", "",
            f"`python perf/gate_sim.py`: {sim['decisions_per_scenario']:,} decisions per scenario through the gate's "
            f"own code: a {sim['test']}, with alpha {st['alpha']}, interim {st['interim_alpha']}, min_effect "
            f"{st['min_effect']} and futility {st['futility']}. A test conditional on the discordant pairs, the "
            f"sign test, cannot pass {pct(sim['sign_test_power_ceiling_15_points_40_tasks'])} for +15 points at 40 "
            "tasks with one pair per task, even knowing the effect: it needs at least 5 wins and no loss, and 4 of 4 "
            "is p = 1/16 whatever the ties. The final look is therefore the exact unconditional test of the "
            "matched-pairs table (Suissa and Shuster 1991), whose error is held at alpha over every discordance "
            f"rate: {pct(rate['+15, deterministic, stability 1.0'])} when the edit changes only the tasks it "
            f"helps, {pct(rate['+15, deterministic, stability 0.9'])} when it also re-rolls about 10% of them (as "
            "a wording change does on the embedded target). A sampled target needs more than one pair per task: "
            f"`--set gate.trials=3` reaches {pct(rate['+15, sampled, 3 trials'])} (the default is 1 trial, to keep "
            "agent runs cheap; several pairs of one task are not independent, so those gates keep the sign "
            "test).", "",
            *table(["scenario", "effect", "val tasks", "accepted", "pairs run", "val rollouts per decision"], rows),
            ""]


def learning_part(doc: dict) -> list[str]:
    runs = [r for r in doc.get("runs", []) if "error" not in r]
    failed = [r for r in doc.get("runs", []) if "error" in r]
    seeds: dict[str, list[str]] = {}
    for r in doc.get("runs", []):
        seeds.setdefault(r["benchmark"], []).append(str(r["split_seed"]))
    commands = "; ".join(f"`python perf/quality.py --benchmarks {b} --seeds {','.join(s)}`" for b, s in seeds.items())
    out = ["### Lift on the sealed test split", "",
           f"{commands}: the README's main job "
           f"(`skillopt run --preset quick`, no key: {models(runs)}) with the split seed changed; seed and best "
           "skill each scored once on the test split; the paired difference with its 95% interval (Agresti-Min). "
           f"Machine: {doc['machine']['cpus']} CPUs, Python {doc['machine']['python']}, {doc['date']}; 1-min load "
           f"average when written {doc['machine']['load_avg_at_write'][0]:.1f} (the job's own).", ""]
    rows = []
    for r in runs:
        d = r.get("test_delta") or {}
        sig = d.get("lo") is not None and d["lo"] > 0
        rows.append([r["benchmark"], str(r["split_seed"]), score(r["seed_test"]), score(r["best_test"]),
                     f"{d.get('mean', 0):+.3f} [{d.get('lo', 0):+.3f}, {d.get('hi', 0):+.3f}]" + (" *" if sig else ""),
                     f"{r.get('test_wins')}/{r.get('test_losses')}", str(r["paired_n"]),
                     f"{r['accepted']}", str(r.get("val_rollouts_per_decision") or "-"),
                     str(r["target_calls_before_test"]), num(r.get("best_test_reply_tokens"), "", 0),
                     f"{r['wall_s'] / 60:.1f} min", gated(r)])
        if r.get("gepa") and "error" not in r["gepa"]:
            g = r["gepa"]
            gd = g["test_delta"]
            rows.append([f"{r['benchmark']} (GEPA 0.1.4)", str(r["split_seed"]), f"{g['seed_test']:.3f}",
                         f"{g['best_test']:.3f}", f"{gd['mean']:+.3f} [{gd['lo']:+.3f}, {gd['hi']:+.3f}]",
                         "-", str(g["n"]), "-", "-", str(g["target_calls_optimizing"]), "-",
                         f"{g['wall_s'] / 60:.1f} min", "-"])
    out += table(["benchmark", "split seed", "seed skill", "best skill", "best - seed [95% CI]", "tasks won/lost",
                  "n", "edits accepted", "val rollouts per decision", "target calls before test",
                  "best skill's test reply (tokens)", "wall", "gated candidates: val won/lost of pairs, stop"], rows)
    gsm = [r for r in runs if r["benchmark"] == "gsm8k"]
    if gsm:
        sig = sum(1 for r in gsm if (r.get("test_delta") or {}).get("lo", 0) > 0)
        fast = sum(1 for r in gsm if r["wall_s"] <= 900)
        out += ["", f"Goal: the best skill beats the seed with an interval that excludes zero in at least 4 of 5 split "
                f"seeds, each run within 15 minutes. Measured: {sig} of {len(gsm)} excluded zero (marked *), "
                f"{fast} of {len(gsm)} finished within 15 minutes: {'met' if sig >= 4 and fast >= 4 else 'not met'}."]
    versus = [r for r in runs if (r.get("gepa") or {}).get("ours_minus_gepa")]
    if versus:
        more = sum(1 for r in versus if r["gepa"]["ours_minus_gepa"]["lo"] > 0)
        less = sum(1 for r in versus if r["gepa"]["ours_minus_gepa"]["hi"] < 0)
        out += ["", "Beside GEPA 0.1.4 (the same benchmark, split, models and seed prompt; GEPA's budget of metric "
                "calls set to the target calls our run made before test, which GEPA overshoots): our best skill "
                "minus GEPA's best prompt on the same test tasks, paired, 95% interval (tasks only ours solved / "
                "only GEPA's): " + "; ".join(
                    f"{r['benchmark']} split seed {r['split_seed']} {v['mean']:+.3f} [{v['lo']:+.3f}, {v['hi']:+.3f}] "
                    f"({v['ours_only']}/{v['gepa_only']})" for r in versus for v in [r["gepa"]["ours_minus_gepa"]])
                + f". More lift than GEPA with an interval that excludes zero in {more} of {len(versus)}, less in "
                f"{less}."]
    if failed:
        out += ["", f"{len(failed)} run(s) ended in an error: " + "; ".join(
            f"{r['benchmark']} seed {r['split_seed']}" for r in failed) + "."]
    return out + [""]


def models(runs: list[dict]) -> str:
    """The target and optimizer the runs used, as recorded in their summaries."""
    pairs = sorted({(r.get("target_model"), r.get("optimizer_model")) for r in runs} - {(None, None)})
    return "; ".join(f"target {t}, optimizer {o}" if t != o else f"{t} as target and optimizer"
                     for t, o in pairs) or "the embedded models"


def score(s: dict | float | None) -> str:
    """A split score as the summary writes it ({"hard", "n", "errors"}; hard null: nothing scored), or a bare mean."""
    if isinstance(s, dict):
        err = f", {s['errors']} errored" if s.get("errors") else ""
        hard = "-" if s.get("hard") is None or not s.get("n") else f"{s['hard']:.3f}"
        return f"{hard} (n={s['n']}{err})"
    return "-" if s is None else f"{s:.3f}"


def gated(run: dict) -> str:
    return "; ".join(f"{d['origin']} {d['wins']}/{d['losses']} of {d['evaluated']}, {d['stop']}"
                     for d in run.get("decisions", [])) or "none"


def headroom_part(doc: dict, others: list[dict] = ()) -> list[str]:
    """The 0.5B target's headroom table (headroom.json), with the rows of other targets measured the same way."""
    rows = [[d["target"].removeprefix("local:"), r["variant"], f"{r['solved']}/{r['n']}",
             num(r["generated_tokens_mean"], "", 0), num(r["wall_s"], " s", 0)]
            for d in (doc, *others) for r in d["results"]]
    commands = "; ".join(f"`{d['command']}`" for d in (doc, *others))
    return ["### How far a skill's text moves the quick job's target", "",
            f"{commands}: the embedded model on the {doc['split']}, temperature 0, at most {doc['max_tokens']} "
            f"tokens, {doc['concurrency']} in flight, under a hand-written working-first skill (numbered steps before "
            f"the answer line, what the optimizer would have to find) and the seed skill, placed three ways; and the "
            f"seed skill with the task's own answer-format line changed to ask for the working. "
            f"{machine_line(doc, 'x')}.", ""] + \
        table(["target", "variant", "solved", "generated tokens", "wall"], rows) + \
        ["", "The 0.5B target follows the task's closing line (\"End your reply with a line 'Answer: <number>' (the "
             "number only, no units)\") and answers at once whatever the skill says and wherever it stands: no skill "
             "text moves it by more than a few tasks of 40. Only the task itself asking for the working changes its "
             "behaviour, at several times the tokens per rollout. That is why the quick job could not show a lift "
             "on GSM8K with this target, and why the embedded default target is now the 1.5B."
             + "".join(f" {d['target'].removeprefix('local:')} does follow the skill: the working-first skill takes it "
                       f"from {a['solved']} to {b['solved']} of {b['n']}, at {b['generated_tokens_mean']:.0f} generated "
                       f"tokens a reply instead of {a['generated_tokens_mean']:.0f}."
                       for d in others if len(d["results"]) >= 2 for a, b in [d["results"][:2]]), ""]


# earlier quick jobs kept for the record: (results file, title, command that reproduces it, what they show)
OTHER_RUNS = (
    ("quality-teacher-3", "Before the teacher solved 5 failed train tasks a step (it solved 3)",
     "python perf/quality.py --benchmarks gsm8k --seeds {seeds} --out perf/results/quality-teacher-3.json",
     "The same job at commit c7d99b8: the worked example was the shortest correct reply among the teacher's "
     "replies to 3 failed train tasks (and the target's own successes). The lifts are of the same size; the "
     "examples, and so the best skills' test replies, were longer on split seeds 1, 3 and 4 (182-215 tokens)."),
    ("quality-example-cut", "Before the worked example was chosen across the target's and the teacher's replies",
     "python perf/quality.py --benchmarks gsm8k --seeds {seeds} --out perf/results/quality-example-cut.json",
     "The same job at commit 9a86495, when the target's own success was preferred to the teacher's replies, chosen "
     "for having the most lines and cut at 1200 characters: on split seed 4 the example was a LaTeX reply cut off "
     "before its answer line, and the target imitated it to the reply cap on 29 of 60 test tasks. Seed 3 accepted "
     "a reflection's instruction to explain every step (252-token replies)."),
    ("quality-target-0.5b", "The same job with the 0.5B model as target (the default target before the 1.5B)",
     "python perf/quality.py --benchmarks gsm8k --seeds {seeds} --set target_model=local:qwen2.5-coder-0.5b "
     "--out perf/results/quality-target-0.5b.json",
     "The 0.5B target answers at once whatever its skill says (next section): the gate rejects the worked "
     "example in four seeds, and the one it accepted did not hold on test."),
    ("quality-target-1.5b", "The 1.5B model as target, before the teacher kept its shortest reply",
     "python perf/quality.py --benchmarks gsm8k --seeds {seeds} --set target_model=local:qwen2.5-coder-1.5b "
     "--out perf/results/quality-target-1.5b.json",
     "The first runs with the 1.5B target, when the worked example was the teacher's first correct reply "
     "rather than its shortest: lifts of the same size, and runs 0.5-2.1 minutes longer on the same split seeds."),
)


def other_runs_part(doc: dict, title: str, command: str, what: str) -> list[str]:
    """Quick jobs run with other settings: one line each."""
    lines = []
    for r in doc.get("runs", []):
        if "error" in r:
            lines.append(f"- {r['benchmark']} split seed {r['split_seed']}: ended in an error.")
            continue
        d = r["test_delta"]
        lines.append(f"- {r['benchmark']}, split seed {r['split_seed']}: test {score(r['seed_test'])} -> "
                     f"{score(r['best_test'])}, best - seed {d['mean']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}] "
                     f"({r['test_wins']} tasks won, {r['test_losses']} lost); gate: {gated(r)} "
                     f"({r['val_rollouts']} validation rollouts); best skill's test replies "
                     f"{num(r.get('best_test_reply_tokens'), ' tokens', 0)}; {r['wall_s'] / 60:.1f} min.")
    seeds = ",".join(str(r["split_seed"]) for r in doc.get("runs", []))
    return [f"### {title}", "", f"`{command.format(seeds=seeds)}` ({doc['date']}):", ""] + lines + ["", what, ""]


def render_quality() -> str:
    parts = [GENERATED, ""]
    if doc := load("quality"):
        parts += learning_part(doc)
    for name, title, command, what in OTHER_RUNS:
        if doc := load(name):
            parts += other_runs_part(doc, title, command, what)
    if doc := load("headroom"):
        parts += headroom_part(doc, [d for d in [load("headroom-1.5b")] if d])
    if sim := load("gate_sim"):
        parts += gate_part(sim)
    return "\n".join(parts).rstrip() + "\n"


def _load_of(uptime: str) -> str:
    return uptime.split("load average:")[1].split(",")[0].strip() if "load average:" in uptime else "?"


def _load_range(uptimes: list[str]) -> str:
    loads = sorted(float(x) for x in map(_load_of, uptimes) if x != "?")
    return f"{loads[0]:.2f}-{loads[-1]:.2f}" if loads else "not recorded"


def limit_part(lim: dict | None) -> list[str]:
    """llama.cpp's own rate for the 1.5B on this machine beside what the preset's requests get, and the
    speculative settings measured against plain decoding (perf/local_model.py --limit)."""
    if not lim or "worked_requests" not in lim:
        return []
    peak = lim["peak"]
    together = peak.get(f"gen_tok_s_{lim['slots']}")
    rows = [[str(w["in_flight"]), str(w["requests"]), num(w["gen_tok_s"], "", 1),
             num(w["prompt_tokens_mean"], "", 0)] for w in lim["worked_requests"]]
    dec = lim.get("decoding", [])
    drows = [[d["settings"], num(d["generated_tokens"], "", 0), num(d["gen_tok_s"], "", 2), "-" if "draft_acceptance" not in d else
              f"{100 * d['draft_acceptance']:.0f}%", "-" if d["settings"] == "plain" else
              f"{lim['speedup_vs_plain'][d['settings']]:.2f}x"] for d in dec]
    out = [f"`{lim['command']}`: the 1.5B with {lim['threads']} threads (what skillopt picks on this machine when "
           f"it is idle; 1-min load {_load_range(lim['uptime'])} during the measurement, the measurement's own). "
           f"llama.cpp's own rate: a cold prompt read at {peak['prompt_tok_s']} tokens/s; {peak['gen_tok_s_1']} "
           f"generated tokens/s for one sequence and {together} "
           f"for {lim['slots']} together (exactly {lim['gen']} tokens each): on this CPU, decoding several sequences "
           "in one step costs about as much per token as decoding them one by one.", "",
           "The best skill's kind of request (the quick preset's test tasks, the seed skill plus a line asking for "
           "numbered working, replies up to the preset's cap, two per slot):", ""]
    out += table(["in flight", "requests", "generated tokens/s", "new prompt tokens a request"], rows) + [""]
    if lim.get("left_out"):
        out += [f"Left out: {lim['left_out']}.", ""]
    if drows:
        out += [f"Speculative decoding on the same requests, one at a time, plain first and last "
                f"({lim.get('decoding_requests', '')}):", ""]
        out += table(["decoding", "generated tokens", "generated tokens/s (prompt read included)", "drafts accepted",
                      "against plain"], drows) + [""]
        speedups = lim.get("speedup_vs_plain", {})
        accepted = max((d.get("draft_acceptance", 0) for d in dec), default=0)
        if speedups and max(speedups.values()) < 1:
            out += ["No speculative setting pays here: checking a draft of k tokens costs the target nearly k decoding "
                    "steps on this CPU (as the sequences-together row above shows), so even "
                    f"{100 * accepted:.0f}% of drafts accepted comes out slower than plain decoding.", ""]
    return out


def requant_part(doc: dict | None) -> list[str]:
    """The shipped Q4_K_M beside the same weights requantized (perf/requant.py): llama.cpp's rates."""
    if not doc:
        return []
    first = doc["runs"][0].get("worked_replies")
    rows = [[r["weights"], num(r["prompt_tok_s"], "", 1), num(r["gen_tok_s_1"], "", 1),
             num(r["worked"]["gen_tok_s"], "", 2), str(r["worked"]["generated_tokens"]),
             "yes" if r.get("worked_replies") == first else "no"] for r in doc["runs"]]
    sizes = ", ".join(f"{c['to']} {c['bytes'] / 2**30:.2f} GiB in {c['convert_s']:.0f} s" for c in doc.get("converted", []))
    return [f"`{doc['command']}`: the shipped Q4_K_M weights dequantized and written again as Q8_0 (keeps the values "
            f"almost exactly) and Q4_0 (quantizes them a second time) with gguf-py ({sizes}), each served in turn "
            f"with 2 threads, the shipped file first and last (1-min load {_load_range(doc['uptime'])}, the "
            "measurement's own):", ""] + \
        table(["weights", "cold prompt tokens/s", "generated tokens/s (one sequence)",
               "best skill's kind of request, tokens/s", "its generated tokens", "replies as the shipped file's"],
              rows) + \
        ["", "Q8_0 keeps the quality (its replies were the shipped file's, word for word) and is slower on both "
             "counts (twice the bytes to read per token); Q4_0 generates about a tenth faster, reads prompts slower "
             "and changes the replies (its values are quantized twice). Neither pays for what it costs, so the "
             "embedded model stays the shipped Q4_K_M.", ""]


def quick_time_part(doc: dict, local: dict | None) -> list[str]:
    """The README's main job, timed as a new user runs it (perf/quick_time.py): minutes per machine state,
    where the time goes, and the floor the measured generation rate sets."""
    # the code as it is; labelled rows compare settings, superseded ones ran a preset that has since changed
    runs = [r for r in doc.get("runs", []) if not r.get("label") and not r.get("superseded")]
    if not runs:
        return []
    older = [r for r in doc.get("runs", []) if r.get("superseded") and not r.get("label")]
    states = list(dict.fromkeys(r["state"] for r in runs))
    out = [GENERATED, ""]
    rows = []
    for state in states:
        mine = [r for r in runs if r["state"] == state]
        loads = [" -> ".join(_load_of(u) for u in r.get("uptime", [])) for r in mine]
        rows.append([state, ", ".join(x for x in loads if x) or "-", spread(mine, "minutes", 1, " min"), str(len(mine)),
                     ", ".join(f"{r['seed_test']:.3f} -> {r['best_test']:.3f}" for r in mine),
                     spread(mine, "rollouts_run", 0), spread(mine, "generated_tokens", 0),
                     ", ".join(str(r["code"]) for r in mine)])
    out += ["How long the main job takes, as a new user runs it (`python perf/quick_time.py --state STATE`: "
            "`skillopt run --preset quick` through the CLI, no key, empty rollout and reply caches, as a first run has; "
            "one-core-busy: beside a process that keeps one CPU busy):", ""]
    out += table(["machine state", "1-min load, start -> end", "wall", "runs", "test, seed -> best", "rollouts run", "generated tokens",
                  "commit"], rows) + [""]
    for why in dict.fromkeys(r["superseded"] for r in older):
        mine = [r for r in older if r["superseded"] == why]
        out += [f"Measured before the preset changed ({why}): " + "; ".join(
            f"{r['state']} {r['minutes']} min at {r['code']} (test {r['seed_test']:.3f} -> {r['best_test']:.3f})"
            for r in mine) + ".", ""]
    ref = next((r for r in runs if r["state"] == "idle"), runs[0])
    busy = next((r for r in runs if r["state"] == "one-core-busy"), None)
    if busy and ref is not busy:
        out += [f"With one core busy the embedded server takes the other one (its threads follow the free CPUs) "
                f"and the same run takes {busy['wall_s'] / ref['wall_s']:.1f}x as long.", ""]
    prow = [[p["phase"], num(p["seconds"], " s", 0), str(p.get("rollouts", p.get("calls", "-"))),
             num(p.get("generated_tokens"), "", 0)] for p in ref["phases"]]
    out += [f"Where the time goes ({ref['state']} run at {ref['code']}, {ref['minutes']} min; phases read from the "
            "run's own rollouts; the optimizer's row counts calls):", ""]
    out += table(["phase", "seconds", "rollouts", "generated tokens"], prow) + [""]
    peak = (local or {}).get("limit", {}).get("peak", {})
    best_rate = max((v for k, v in peak.items() if k.startswith("gen_tok_s_")), default=None)
    test = next((p for p in ref["phases"] if p["phase"] == "test, best skill"), None)
    rate = test["generated_tokens"] / test["seconds"] if test and test["seconds"] else None
    if best_rate and rate and rate > best_rate:  # measured on another day's machine: no floor for this run
        out += [f"The run generated {ref['generated_tokens']:,} tokens, most of them the best skill's working on test "
                f"and validation; its generation-bound phase (the best skill's test) generated {rate:.1f} tokens/s, "
                f"prompts included: {rate / best_rate:.2f}x the best rate perf/local_model.py --limit measured "
                f"({best_rate:.1f} tokens/s, below), so that measurement, made on another day, is no floor for "
                "this run's machine.", ""]
    elif best_rate:
        floor = ref["generated_tokens"] / best_rate / 60
        out += [f"The floor: the run generated {ref['generated_tokens']:,} tokens, most of them the best skill's "
                f"working on test and validation. llama.cpp's best generation rate for this model on this machine is "
                f"{best_rate:.1f} tokens/s (perf/local_model.py --limit, below: one sequence, no prompt to read), so "
                f"generating them alone takes {floor:.1f} minutes, before any of the run's {ref['prompt_tokens']:,} "
                "prompt tokens is read or any optimizer call waited for."
                + (f" The run's own generation-bound phase (the best skill's test) generated {test['generated_tokens'] / test['seconds']:.1f} "
                   f"tokens/s, prompts included: {test['generated_tokens'] / test['seconds'] / best_rate:.2f} of that "
                   "rate." if test and test["seconds"] else ""), ""]
    repeated = [r for r in runs if r.get("repeated")]
    for r in repeated:
        rep = r["repeated"]
        out.append(f"- The same command a second time ({r['state']}, at {r['code']}): {rep['wall_s']:.0f} s, "
                   f"{rep['rollouts_run']} of {rep['rollouts']} rollouts run and {rep['model_calls']} model calls "
                   f"made ({rep['replayed_calls']} optimizer replies replayed from the first run); "
                   f"{'the same' if rep['same_best_skill'] else 'another'} best skill.")
    return out + ([""] if repeated else [])


def render() -> str:
    parts = [GENERATED, ""]
    parts += goals_part(load("peers"), load("scale"), load("local_model"), load("ray_scaling"))
    for name, fn in (("peers", peers_part), ("scale", scale_part), ("local_model", local_part),
                     ("ray_scaling", ray_part)):
        doc = load(name)
        if doc:
            parts += fn(doc)
    return "\n".join(parts).rstrip() + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    readme = REPO / "README.md"
    text = new = readme.read_text(encoding="utf-8")
    from readme_agents import render_agents
    from readme_suite import render_suite

    for block, fn in (("perf", render), ("quality", render_quality), ("suite", lambda: render_suite(
                          load("suite"), [d for d in (load("knowledge_headroom"), load("knowledge_headroom_boolq"),
                                       load("knowledge_headroom_code"), load("knowledge_headroom_second"),
                                       load("knowledge_headroom_math"), load("knowledge_headroom_math512"),
                                       load("knowledge_headroom_mbpp")) if d])),
                      ("quicktime", lambda: "\n".join(quick_time_part(load("quick_time") or {}, load("local_model")))
                       .rstrip() + "\n"),
                      ("agents", lambda: render_agents(load("agents"), load("agent_prompts")))):
        begin, end = f"<!-- {block}:begin -->", f"<!-- {block}:end -->"
        if begin not in new or end not in new:
            sys.exit(f"README.md has no {begin} ... {end} section")
        head, rest = new.split(begin, 1)
        _, tail = rest.split(end, 1)
        new = f"{head}{begin}\n{fn()}{end}{tail}"
    if args.check:
        sys.exit(0 if new == text else 1)
    readme.write_text(new, encoding="utf-8")


if __name__ == "__main__":
    main()
