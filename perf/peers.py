"""skillopt against its peers, interleaved, against one instant fake model server.

Peers, each in its own venv under the cache folder (`perf/peer_envs.py`): microsoft/SkillOpt 0.2.0
(PyPI `skillopt`) and GEPA 0.1.4 (PyPI `gepa`, with LiteLLM). For each repeat, each tool in turn:

- an evaluation of a QA file (default: 200 items at concurrency 8, and 1,000 at concurrency 64);
- process start (launch to ready: `--version` / `--help` / `import`);
- a 2-step optimisation (8 train items, 20 val items, minibatches of 4), with the target and
  optimizer calls counted at the server, per accept/reject decision.

Measured per run: wall time (launch to exit), launch to first model call, first call to last call
(rollouts/s), last call to exit, CPU time, peak RSS. The JSON holds every repeat, the medians and the
ratios (skillopt against each peer), and the machine's load.

What microsoft/SkillOpt needs that its wheel lacks (its prompt files) is written into its venv by
`supply_skillopt_files`; the README lists it. GEPA runs offline with LITELLM_LOCAL_MODEL_COST_MAP=True.

The model server is `perf/instant_server.py` (its own process, about 0.1 ms a request), so the
figures are the tools' own cost.

Usage: python perf/peers.py [--repeats 3] [--evals 200:8 1000:64] [--no-optimise]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perf.common import REPO, InstantServer, machine, measure, skillopt, write_result  # noqa: E402
from perf.peer_envs import PEERS, peer_python  # noqa: E402
from tests.helpers import cli_env, write_jsonl  # noqa: E402

SKILL = REPO / "skills" / "default" / "SKILL.md"
GEPA_DRIVER = REPO / "perf" / "peer_drivers" / "gepa_driver.py"
TOOLS = ("skillopt", "microsoft-skillopt", "gepa")

# microsoft/SkillOpt 0.2.0's wheel ships none of its prompt files (`load_prompt` reads them from the
# package folder). These are the only files supplied: one rollout prompt for its `searchqa` QA
# environment (with the `{skill_section}` slot its code fills) and the four optimizer prompts its
# default training path (patch mode, no meta-skill, no slow update) loads.
SKILLOPT_FILES = {
    "envs/searchqa/prompts/rollout_system.md":
        "You answer questions from the given context.\n{skill_section}Put the final answer inside <answer>...</answer>.\n",
    **{f"prompts/{name}.md": "You improve a skill document from the trajectories shown. Reply with one JSON object only.\n"
       for name in ("analyst_error", "merge_failure", "merge_success", "merge_final")},
}


def supply_skillopt_files(python: Path) -> list[str]:
    """Write the files microsoft/SkillOpt needs into its installed package (once); returns their paths."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # its own `skillopt`, never ours
    pkg = Path(subprocess.run([str(python), "-I", "-c", "import skillopt, os; print(os.path.dirname(skillopt.__file__))"],
                              capture_output=True, text=True, check=True, env=env).stdout.strip())
    if not (pkg / "model").is_dir():
        raise RuntimeError(f"{pkg} is not microsoft/SkillOpt's package")
    for rel, text in SKILLOPT_FILES.items():
        path = pkg / rel
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    return sorted(SKILLOPT_FILES)


def qa_rows(n: int) -> list[dict]:
    return [{"id": f"q{i:05d}", "question": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(n)]


class Bench:
    def __init__(self, tmp: Path, srv: InstantServer, pythons: dict[str, Path]):
        self.tmp, self.srv, self.py = tmp, srv, pythons
        self.env = cli_env(tmp, OPENAI_BASE_URL=srv.openai_url, OPENAI_API_BASE=srv.openai_url, OPENAI_API_KEY="x",
                           LITELLM_LOCAL_MODEL_COST_MAP="True")
        # the peers' own venvs: nothing of ours on their path (microsoft/SkillOpt is also `skillopt`)
        self.peer_env = {k: v for k, v in self.env.items() if k != "PYTHONPATH"}
        self.n = 0

    def _folder(self, what: str) -> Path:
        self.n += 1
        path = self.tmp / f"{self.n:03d}-{what}"
        path.mkdir()
        return path

    def _run(self, argv: list[str], cwd: Path, tool: str) -> dict:
        self.srv.reset()
        m = measure(argv, cwd, self.env if tool == "skillopt" else self.peer_env)
        if m.rc != 0:
            raise RuntimeError(f"{argv[:4]} failed ({m.rc}): {m.stderr[-1500:]}")
        st = self.srv.stats()
        first, last, calls, by_model = st["first_call_at"], st["last_call_at"], st["calls"], st["by_model"]
        out = {**m.as_dict(), "calls": calls, "calls_by_role": {
            "target": sum(v for k, v in by_model.items() if "target" in k),
            "optimizer": sum(v for k, v in by_model.items() if "opt" in k)}}
        if first and last:
            out.update({"start_to_first_call_s": round(first - m.started_at, 3),
                        "first_to_last_call_s": round(last - first, 3),
                        "last_call_to_exit_s": round(m.ended_at - last, 3),
                        "rollouts_per_s": round((calls - 1) / (last - first), 1) if last > first else None})
        return out

    # -- evaluation --------------------------------------------------------------------------------
    def evaluate(self, tool: str, n: int, concurrency: int) -> dict:
        d = self._folder(f"eval-{tool}-{n}")
        data = write_jsonl(d / "qa.jsonl", qa_rows(n))
        url = self.srv.openai_url
        if tool == "skillopt":
            argv = skillopt("eval", "--skill", str(SKILL), "--benchmark", str(data), "--split", "all",
                            "--harness", "chat", "--target-model", f"openai-compatible:fake-target@{url}",
                            "--concurrency", str(concurrency))
        elif tool == "gepa":
            argv = [str(self.py["gepa"]), str(GEPA_DRIVER), "eval", str(data), str(SKILL), "--workers", str(concurrency)]
        else:
            cfg = self._skillopt_config(d, n, concurrency, split_ratio=f"{n}:1:1", extra_items=2)
            argv = [str(self.py["skillopt"]), "-m", "scripts.eval_only", "--config", str(cfg), "--skill", str(SKILL),
                    "--split", "train"]
        out = self._run(argv, d, tool)
        out["overhead_ms_per_rollout"] = round(out["wall_s"] * 1000 / n, 2)
        return out

    def _skillopt_config(self, d: Path, n: int, workers: int, split_ratio: str, extra_items: int = 0,
                         train: dict | None = None) -> Path:
        items = [{"id": r["id"], "question": r["question"], "context": "[DOC] arithmetic", "answers": [r["answer"]]}
                 for r in qa_rows(n + extra_items)]
        (d / "items.json").write_text(json.dumps(items))
        lines = {"env": "searchqa", "data_path": str(d / "items.json"), "split_mode": "ratio",
                 "split_ratio": split_ratio, "split_output_dir": str(d / "split"),
                 "azure_openai_endpoint": self.srv.openai_url, "azure_openai_auth_mode": "openai_compatible",
                 "azure_openai_api_key": "x", "target_model": "fake-target", "optimizer_model": "fake-opt",
                 "workers": workers, "out_root": str(d / "out"), **(train or {})}
        path = d / "config.yaml"
        path.write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in lines.items()))
        return path

    # -- process start ------------------------------------------------------------------------------
    def start(self, tool: str) -> dict:
        d = self._folder(f"start-{tool}")
        argv = {"skillopt": skillopt("--version"),
                "microsoft-skillopt": [str(self.py["skillopt"]), "-m", "scripts.train", "--help"],
                "gepa": [str(self.py["gepa"]), "-c", "import gepa, litellm"]}[tool]
        return measure(argv, d, self.env if tool == "skillopt" else self.peer_env).as_dict()

    # -- a 2-step optimisation -----------------------------------------------------------------------
    def optimise(self, tool: str) -> dict:
        d = self._folder(f"opt-{tool}")
        url = self.srv.openai_url
        if tool == "skillopt":
            data = write_jsonl(d / "qa.jsonl", qa_rows(28))
            argv = skillopt("--runs-dir", str(d / "runs"), "run", "--benchmark", str(data), "--harness", "chat",
                            "--target-model", f"openai-compatible:fake-target@{url}",
                            "--optimizer-model", f"openai-compatible:fake-opt@{url}", "--run-id", "opt",
                            "--train-size", "8", "--val-size", "20", "--test-size", "0", "--epochs", "1",
                            "--batch-size", "4", "--concurrency", "8", "--set", "train.consolidate=false",
                            "--set", "train.minibatch_size=4")
        elif tool == "gepa":
            data = write_jsonl(d / "qa.jsonl", qa_rows(28))
            argv = [str(self.py["gepa"]), str(GEPA_DRIVER), "optimize", str(data), str(SKILL), "--train", "8",
                    "--val", "20", "--proposals", "2", "--minibatch", "4", "--workers", "8", "--run-dir", str(d / "gepa")]
        else:
            cfg = self._skillopt_config(d, 28, 8, split_ratio="8:20:2", extra_items=2, train={
                "skill_init": str(SKILL), "num_epochs": 1, "batch_size": 4, "accumulation": 1, "train_size": 8,
                "edit_budget": 2, "minibatch_size": 4, "merge_batch_size": 4, "analyst_workers": 2,
                "sel_env_num": 0, "test_env_num": 0, "eval_test": False, "seed": 42, "use_gate": True})
            argv = [str(self.py["skillopt"]), "-m", "scripts.train", "--config", str(cfg)]
        out = self._run(argv, d, tool)
        decisions = self._decisions(tool, d, out)
        out["decisions"] = decisions
        if decisions:
            for role in ("target", "optimizer"):
                out[f"{role}_calls_per_decision"] = round(out["calls_by_role"][role] / decisions, 1)
        return out

    @staticmethod
    def _decisions(tool: str, d: Path, out: dict) -> int:
        if tool == "skillopt":  # every candidate that got a verdict: screened out, or accepted / rejected by the gate
            return sum(1 for f in (d / "runs" / "opt" / "steps").glob("*/candidates.json")
                       for c in json.loads(f.read_text()) if c.get("status") in ("screened-out", "accepted", "rejected"))
        if tool == "gepa":
            return 2  # MaxCandidateProposalsStopper(2): two proposals, each accepted or rejected
        summary = json.loads((d / "out" / "summary.json").read_text()) if (d / "out" / "summary.json").is_file() else {}
        steps = summary.get("steps") or summary.get("history") or []
        return sum(1 for s in steps if isinstance(s, dict) and s.get("action") in ("accept", "reject")) or 2


def median(runs: list[dict], key: str) -> float | None:
    vals = [r[key] for r in runs if r.get(key) is not None]
    return round(statistics.median(vals), 3) if vals else None


def summarise(doc: dict) -> dict:
    """Medians per tool and the ratios of skillopt to each peer."""
    out: dict = {}
    for what, runs in doc["runs"].items():
        med = {tool: {k: median(rs, k) for k in ("wall_s", "cpu_s", "peak_rss_mib", "start_to_first_call_s",
                                                   "first_to_last_call_s", "last_call_to_exit_s", "rollouts_per_s",
                                                   "overhead_ms_per_rollout", "target_calls_per_decision",
                                                   "optimizer_calls_per_decision")}
               for tool, rs in runs.items()}
        ratios = {}
        for peer in TOOLS[1:]:
            ours, theirs = med.get("skillopt", {}), med.get(peer, {})
            if ours.get("rollouts_per_s") and theirs.get("rollouts_per_s"):
                ratios[f"rollouts_per_s_vs_{peer}"] = round(ours["rollouts_per_s"] / theirs["rollouts_per_s"], 2)
            if ours.get("wall_s") and theirs.get("wall_s"):
                ratios[f"wall_s_{peer}_over_ours"] = round(theirs["wall_s"] / ours["wall_s"], 2)
        out[what] = {"median": med, "ratios": ratios}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--evals", nargs="+", default=["200:8", "1000:64"], help="N:CONCURRENCY evaluations")
    ap.add_argument("--no-optimise", action="store_true")
    ap.add_argument("--only", nargs="+", choices=["evals", "start", "optimise"],
                    help="measure only these, and keep the other parts of an existing result file")
    ap.add_argument("--out", default="peers")
    args = ap.parse_args()
    pythons = {name: peer_python(name) for name in PEERS}
    supplied = supply_skillopt_files(pythons["skillopt"])
    doc: dict = {"machine": machine(), "command": "python perf/peers.py " + " ".join(sys.argv[1:]),
                 "peers": {"microsoft-skillopt": PEERS["skillopt"].requirement, "gepa": PEERS["gepa"].requirement},
                 "supplied_to_microsoft_skillopt": supplied, "server": "perf/instant_server.py (its own process, ~0.1 ms per request)",
                 "load_avg_during": [], "runs": {}}
    evals = [tuple(int(x) for x in e.split(":")) for e in args.evals]
    only = set(args.only or ["evals", "start", "optimise"])
    if args.no_optimise:
        only.discard("optimise")
    kept = {}
    if args.only and (prev := Path(REPO / "perf" / "results" / f"{args.out}.json")).is_file():
        old = json.loads(prev.read_text())
        kept = {k: v for k, v in old["runs"].items()
                if not ((k.startswith("eval_") and "evals" in only) or (k == "process_start" and "start" in only)
                        or (k == "optimise_2_steps" and "optimise" in only))}
        doc["load_by_part"] = {k: v for k, v in (old.get("load_by_part") or {}).items() if k in kept}
        for k in kept:  # results written before loads were kept per part: the old file's loads
            doc["load_by_part"].setdefault(k, {"date": old["machine"].get("date"), "loads": old.get("load_avg_during", [])})
        doc["command"] = old.get("command", doc["command"]) + " ; then " + doc["command"]
    doc["runs"].update(kept)
    with tempfile.TemporaryDirectory() as t, InstantServer() as srv:
        bench = Bench(Path(t), srv, pythons)
        for rep in range(args.repeats):  # interleaved: every tool once per repeat, in turn
            for n, conc in (evals if "evals" in only else []):
                for tool in TOOLS:
                    doc["runs"].setdefault(f"eval_{n}_c{conc}", {}).setdefault(tool, []).append(
                        bench.evaluate(tool, n, conc))
            for tool in (TOOLS if "start" in only else []):
                doc["runs"].setdefault("process_start", {}).setdefault(tool, []).append(bench.start(tool))
            if "optimise" in only:
                for tool in TOOLS:
                    doc["runs"].setdefault("optimise_2_steps", {}).setdefault(tool, []).append(bench.optimise(tool))
            load = machine()["load_avg_1_5_15"]
            doc["load_avg_during"].append(load)
            for part in doc["runs"]:
                if part not in kept:
                    doc.setdefault("load_by_part", {}).setdefault(part, {"date": doc["machine"]["date"], "loads": []})
                    doc["load_by_part"][part]["loads"].append(load)
            doc["summary"] = summarise(doc)
            write_result(args.out, doc)
            print(f"repeat {rep + 1}: {json.dumps(doc['summary'])}", flush=True)
    print(write_result(args.out, doc))


if __name__ == "__main__":
    main()
