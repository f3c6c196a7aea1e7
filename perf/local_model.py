"""Embedded local model: start time, prompt and generation tokens/s (llama.cpp's own timings),
the prefix-cache effect (one skill prefix, many tasks), the throughput of concurrent requests over
the parallel slots, and rollouts per minute of the real `skillopt run --preset quick`.

Usage: python perf/local_model.py [--models qwen2.5-coder-0.5b smollm2-135m] [--gen 128]
                                  [--threads 0 1] [--no-preset] [--out perf/results/local_model.json]
       python perf/local_model.py --preset-only --code /path/to/other/checkout --label before --repeats 2
       python perf/local_model.py --serving --repeats 2
       python perf/local_model.py --limit --tasks 4 --gen 32 --decoding-tasks 2
       python perf/local_model.py --decoding "draft 0.5b, 3 drafted" --decoding-tasks 1

`--limit`: for the 1.5B, llama.cpp's own peak (prompt tokens/s, generated tokens/s at 1 and N sequences) at
the thread count skillopt picks, beside what the quick preset's requests get, and speculative decoding
(the 0.5B as draft, n-gram lookup) against plain decoding on the preset's replies, interleaved.

`--serving` sends the quick preset's own rollouts (the chat harness's requests for its test tasks) to
servers started with the settings in `SETTINGS`, interleaved, and stores rollouts/min per setting.

`--preset-only` measures only `skillopt run --preset quick`, `--repeats` times, with the skillopt of `--code`
(a checkout: its folder goes first on PYTHONPATH; default this one), and stores it under `preset_quick`
by `--label` in the result file (other labels are kept): so one file holds before and after.

`--threads 0` is skillopt's default (`local.cpu_threads()`). On a shared machine the numbers swing with the
load average, which is recorded next to each result.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from perf.common import asks_afresh, machine, quick_preset_tasks, quick_seed_skill, uptime, write_json  # noqa: E402
from skillopt.config import PRESETS  # noqa: E402
from skillopt.models.local import LocalServer, weights_path  # noqa: E402

# A skill-sized system prompt (~1,000 tokens) and a short task, like a chat-harness rollout.
TASKS = 8  # warm requests sharing the skill prefix

SKILL = "\n".join(f"- Rule {i}: when the task mentions item {i}, check units, restate the question, "
                  f"and answer with the final number on its own line." for i in range(40))


def _chat(client: httpx.Client, base: str, user: str, max_tokens: int) -> dict:
    body = {"messages": [{"role": "system", "content": SKILL}, {"role": "user", "content": user}],
            "max_tokens": max_tokens, "temperature": 0.7, "cache_prompt": True,
            "ignore_eos": True}  # llama.cpp: generate exactly max_tokens, for a stable measurement
    r = client.post(f"{base}/v1/chat/completions", json=body)
    r.raise_for_status()
    return r.json()


def measure(name: str, gen: int, concurrency: int, threads: int) -> dict:
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    weights_path(name)
    t_weights = time.perf_counter() - t0
    server = LocalServer(name, threads=threads or None)
    t0 = time.perf_counter()
    server.start()
    t_start = time.perf_counter() - t0
    try:
        with httpx.Client(timeout=600) as client:
            base = server.base_url
            # cold prompt: nothing cached yet
            cold = _chat(client, base, "Task 1: a train goes 60 km/h for 2.5 h. How far?", gen)["timings"]
            # warm prompts: the skill prefix is cached, only the task is new
            warms = [_chat(client, base, f"Task {i}: {i} boxes of 12 eggs. How many eggs?", gen)["timings"]
                     for i in range(2, 2 + TASKS)]
            warm = warms[0]
            warm_ms = sum(w["prompt_ms"] for w in warms) / TASKS
            t0 = time.perf_counter()
            with ThreadPoolExecutor(concurrency) as pool:
                outs = list(pool.map(lambda i: _chat(client, base, f"Task {i}: what is {i} * 7?", gen),
                                     range(concurrency)))
            wall = time.perf_counter() - t0
            gen_tokens = sum(o["usage"]["completion_tokens"] for o in outs)
    finally:
        server.stop()
    return {
        "model": name, "threads": threads or "default",
        "load_avg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "weights_s": round(t_weights, 2), "server_start_s": round(t_start, 2),
        "prompt_tokens": cold["prompt_n"], "prompt_tok_s": round(cold["prompt_per_second"], 1),
        "generated_tokens": cold["predicted_n"], "gen_tok_s": round(cold["predicted_per_second"], 1),
        "cold_prompt_ms": round(cold["prompt_ms"], 1),
        "warm_cached_tokens": warm["cache_n"], "warm_prompt_ms": round(warm["prompt_ms"], 1),
        "prefix_cache": {"tasks": TASKS, "cached_tokens_mean": round(sum(w["cache_n"] for w in warms) / TASKS, 1),
                         "new_prompt_tokens_mean": round(sum(w["prompt_n"] for w in warms) / TASKS, 1),
                         "prompt_ms_mean": round(warm_ms, 1), "speedup_vs_cold": round(cold["prompt_ms"] / warm_ms, 1)},
        "warm_gen_tok_s": round(warm["predicted_per_second"], 1),
        "concurrent_requests": concurrency, "concurrent_gen_tokens": gen_tokens,
        "concurrent_wall_s": round(wall, 2), "concurrent_gen_tok_s": round(gen_tokens / wall, 1),
    }


# Server settings compared by `--serving` (slots, generation threads, batch threads, rollouts in flight;
# None: skillopt's default / the preset's concurrency). The last is one request at a time with
# every CPU, nothing shared between requests.
SETTINGS = {
    "before issue 12 (2 slots, 1 generation thread, 2 batch threads)": (2, 1, 2, None),
    "last stop (4 slots, 1 thread for both)": (4, 1, 1, None),
    "now (4 slots, threads = free CPUs at start)": (4, None, None, None),
    "one at a time (1 slot, every CPU, 1 in flight)": (1, None, None, 1),
}


def quick_requests(n: int) -> list[tuple[str, str]]:
    """(system, user) of the quick preset's first `n` test-split rollouts with the seed skill, exactly as
    the chat harness sends them."""
    from skillopt.prompts import chat_system

    system = chat_system(quick_seed_skill())
    return [(system, t.prompt) for t in quick_preset_tasks("test")[:n]]


def serve_once(label: str, requests: list[tuple[str, str]], concurrency: int, reply_tokens: int | None) -> dict:
    """`requests` through one server with `SETTINGS[label]`, `concurrency` at a time: rollouts/min.
    `reply_tokens`: generate exactly that many tokens per reply (a generation-bound load); None: the
    preset's own replies (`limits.max_tokens`, temperature 0, as gate rollouts run)."""
    slots, threads, batch, in_flight = SETTINGS[label]
    concurrency = in_flight or concurrency

    class Server(LocalServer):
        batch_threads = property(lambda self: batch or LocalServer.batch_threads.fget(self))

    load = os.getloadavg()[0]
    server = Server("qwen2.5-coder-0.5b", slots=slots, threads=threads)
    server.start()
    try:
        with httpx.Client(timeout=900) as client:
            def one(req: tuple[str, str]) -> dict:
                body = {"messages": [{"role": "system", "content": req[0]}, {"role": "user", "content": req[1]}],
                        "max_tokens": reply_tokens or PRESETS["quick"]["limits"]["max_tokens"], "temperature": 0,
                        "seed": 0}
                if reply_tokens:
                    body["ignore_eos"] = True
                r = client.post(f"{server.base_url}/v1/chat/completions", json=body)
                r.raise_for_status()
                return r.json()["timings"]
            one(requests[0])  # the skill prefix into the cache, as a run's first rollout does
            t0 = time.perf_counter()
            with ThreadPoolExecutor(concurrency) as pool:
                timings = list(pool.map(one, requests))
            wall = time.perf_counter() - t0
    finally:
        server.stop()
    return {"settings": label, "threads": [server.threads, server.batch_threads], "in_flight": concurrency,
            "rollouts": len(requests),
            "wall_s": round(wall, 1), "rollouts_per_min": round(len(requests) / wall * 60, 1),
            "prompt_tokens_mean": round(sum(t["prompt_n"] for t in timings) / len(timings), 1),
            "generated_tokens_mean": round(sum(t["predicted_n"] for t in timings) / len(timings), 1),
            "load_avg_1m": [round(load, 2), round(os.getloadavg()[0], 2)]}


def serving(args) -> None:
    """`--serving`: the quick preset's rollouts served under each of `SETTINGS`, interleaved, `--repeats`
    rounds; and the same with replies of `--gen` tokens. Stored under `serving` in the result file."""
    out = Path(args.out)
    doc = json.loads(out.read_text()) if out.is_file() else {"machine": machine(), "results": []}
    requests = quick_requests(args.tasks)
    runs: dict[str, list] = {"preset replies": [], f"{args.gen}-token replies": []}
    for _ in range(args.repeats):
        for load_name, reply in (("preset replies", None), (f"{args.gen}-token replies", args.gen)):
            for label in SETTINGS:
                r = serve_once(label, requests if reply is None else requests[:16], args.concurrency, reply)
                runs[load_name].append(r)
                print(json.dumps(r), flush=True)
    doc["serving"] = {"machine": machine(), "concurrency": args.concurrency, "tasks": args.tasks,
                      "command": f"python perf/local_model.py --serving --repeats {args.repeats}", "runs": runs}
    out.write_text(json.dumps(doc, indent=2) + "\n")


def preset_run(code: Path = REPO) -> dict:
    """The README's main job (`skillopt run --preset quick`, local model as target and optimizer),
    through the real CLI in a scratch folder: wall time, rollouts, rollouts per minute."""
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_AUTH_TOKEN", "_BASE_URL"))}
    env["PYTHONPATH"] = str(code)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "skillopt", "--runs-dir", tmp, "run", "--preset", "quick",
                               "--run-id", "perf-quick", *asks_afresh(code)], cwd=code, env=env, capture_output=True,
                              text=True)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            return {"error": proc.stderr.strip()[-500:]}
        run = Path(tmp) / "perf-quick"
        rollouts = [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines() if x.strip()]
        summary = json.loads((run / "summary.json").read_text())
    roles = summary["meter"]["roles"]
    return {"load_avg_1m": [round(load, 2), round(os.getloadavg()[0], 2)],
            "wall_s": round(wall, 1), "rollouts": len(rollouts), "rollouts_per_min": round(len(rollouts) / wall * 60, 1),
            "target_calls": roles.get("target", {}).get("calls"), "optimizer_calls": roles.get("optimizer", {}).get("calls"),
            "steps": summary["steps"], "candidates": summary["candidates_accepted"] + summary["candidates_rejected"],
            "scores": {role: {split: (s or {}).get("hard") for split, s in by.items()}
                       for role, by in summary["scores"].items()}}


# -- `--limit`: llama.cpp's own peak beside what a run's requests get, and speculative decoding ------------

LIMIT_MODEL, DRAFT_MODEL = "qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"
DECODING = {  # speculative settings compared on the preset's replies, one request at a time, interleaved
    "plain": {},
    "draft 0.5b": {"draft": DRAFT_MODEL, "draft_max": 8},
    "draft 0.5b, 3 drafted": {"draft": DRAFT_MODEL, "draft_max": 3},  # llama.cpp's own default
    "lookup (n-gram)": {"lookup": True},
}


WORKING = "\n\nBefore the answer line, write your working as short numbered steps.\n"


def _post(client: httpx.Client, base: str, system: str, user: str, max_tokens: int, exact: bool) -> dict:
    body = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "max_tokens": max_tokens, "temperature": 0, "seed": 0}
    if exact:
        body["ignore_eos"] = True  # exactly max_tokens: llama.cpp's own rate, independent of the reply
    r = client.post(f"{base}/v1/chat/completions", json=body)
    r.raise_for_status()
    return r.json()


def _batch(client: httpx.Client, base: str, reqs: list[tuple[str, str]], max_tokens: int, exact: bool,
           concurrency: int) -> dict:
    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        outs = list(pool.map(lambda r: _post(client, base, r[0], r[1], max_tokens, exact), reqs))
    wall = time.perf_counter() - t0
    timings = [o["timings"] for o in outs]
    generated = sum(t["predicted_n"] for t in timings)
    out = {"requests": len(reqs), "in_flight": min(concurrency, len(reqs)), "wall_s": round(wall, 2),
           "generated_tokens": generated, "gen_tok_s": round(generated / wall, 2),
           "prompt_tokens_mean": round(sum(t["prompt_n"] for t in timings) / len(timings), 1),
           "cached_prompt_tokens_mean": round(sum(t.get("cache_n", 0) for t in timings) / len(timings), 1)}
    drafted = sum(t.get("draft_n", 0) for t in timings)
    if drafted:
        out["draft_acceptance"] = round(sum(t.get("draft_n_accepted", 0) for t in timings) / drafted, 3)
    return out


def limit(args) -> None:
    """`--limit`: for the 1.5B at the thread count skillopt picks now, llama.cpp's own peak (a cold prompt's
    tokens/s; generated tokens/s with exactly `--gen` tokens at 1 and at N sequences) beside the quick
    preset's own requests at N in flight; then plain / draft / lookup decoding on the preset's replies,
    one at a time, interleaved (plain first and last). `uptime` before and after each part."""
    from skillopt.models.local import cpu_threads

    out = Path(args.out)
    doc = json.loads(out.read_text()) if out.is_file() else {"machine": machine(), "results": []}
    n, threads = args.concurrency, args.limit_threads or cpu_threads()[0]
    in_flights = [int(k) for k in args.worked_in_flight.split(",") if k]
    reqs = quick_requests(n + max(args.tasks, 2 * sum(in_flights)) + 1)
    system = reqs[0][0]
    res: dict = {"model": LIMIT_MODEL, "threads": threads, "slots": n, "gen": args.gen,
                 "command": f"python perf/local_model.py --limit --tasks {args.tasks} --gen {args.gen} --max-reply {args.max_reply} "
                            f"--decoding-tasks {args.decoding_tasks} --worked-in-flight {args.worked_in_flight}",
                 "uptime": [uptime()]}
    server = LocalServer(LIMIT_MODEL, slots=max([n, *in_flights]), threads=threads)
    server.start()
    try:
        with httpx.Client(timeout=1800) as client:
            base = server.base_url
            cold = _post(client, base, system, reqs[-1][1], 1, False)["timings"]  # nothing cached yet
            res["peak"] = {"prompt_tokens": cold["prompt_n"], "prompt_tok_s": round(cold["prompt_per_second"], 1)}
            one = _post(client, base, system, reqs[0][1], args.gen, True)["timings"]
            res["peak"]["gen_tok_s_1"] = round(one["predicted_per_second"], 2)
            res["peak"][f"gen_tok_s_{n}"] = _batch(client, base, [(system, r[1]) for r in reqs[:n]], args.gen, True,
                                                   n)["gen_tok_s"]
            res["uptime"].append(uptime())
            # other tasks than the peak's: only the skill prefix is cached, as in a run
            res["skillopt_requests"] = _batch(client, base, reqs[n:n + args.tasks], args.max_reply, False, n)
            # the best skill's kind of request (working before the answer: most of a run's generated tokens),
            # two per slot at each number in flight, tasks not asked before (only the skill prefix cached, as
            # in a run): how many sequences to decode together
            worked = [(system + WORKING, user) for _, user in reqs[n:n + 2 * sum(in_flights)]]
            if worked:
                _post(client, base, worked[0][0], reqs[-1][1], 1, False)  # its prefix into the cache
            res["worked_requests"] = []
            for k in in_flights:
                batch, worked = worked[:2 * k], worked[2 * k:]
                res["worked_requests"].append({"uptime": uptime(), **_batch(client, base, batch, args.max_reply,
                                                                             False, k)})
            for row in res["worked_requests"]:
                print(json.dumps(row), flush=True)
    finally:
        server.stop()
    achieved, peak_n = res["skillopt_requests"]["gen_tok_s"], res["peak"][f"gen_tok_s_{n}"]
    res["ratio_of_peak"] = round(achieved / peak_n, 3) if peak_n else None
    res["uptime"].append(uptime())
    print(json.dumps(res), flush=True)
    res.update(decoding(reqs[n:], system, threads, args, list(DECODING)))
    res["uptime"].append(uptime())
    if doc.get("limit"):  # an earlier machine state stays beside this one
        doc.setdefault("limit_earlier", []).append(doc["limit"])
    doc["limit"] = res
    write_json(out, doc)


def decoding(reqs: list[tuple[str, str]], system: str, threads: int, args, labels: list[str]) -> dict:
    """`labels` of `DECODING` on the preset's replies, one request at a time, plain first and last (the
    load may drift); their generated tokens/s and the speedup over plain."""
    # the best skill's replies are long (numbered working before the answer, the optimizer's "working-first"
    # template); the seed's are often one line: the decoding comparison asks for the working
    worked = [(system + WORKING, user) for _, user in reqs[:args.decoding_tasks]]
    res: dict = {"decoding_requests": f"{len(worked)} quick-preset test tasks, seed skill + {WORKING.strip()!r}, "
                                      f"max_tokens {args.max_reply}, temperature 0, one at a time", "decoding": []}
    for label in ["plain", *[x for x in labels if x != "plain"], "plain"]:
        srv = LocalServer(LIMIT_MODEL, slots=1, threads=threads, **DECODING[label])
        srv.start()
        try:
            with httpx.Client(timeout=1800) as client:
                _post(client, srv.base_url, worked[0][0], reqs[-1][1], 1, False)  # the skill prefix into the cache
                row = {"settings": label, "uptime": uptime(),
                       **_batch(client, srv.base_url, worked, args.max_reply, False, 1)}
        finally:
            srv.stop()
        res["decoding"].append(row)
        print(json.dumps(row), flush=True)
    plain = [r["gen_tok_s"] for r in res["decoding"] if r["settings"] == "plain"]
    base_rate = sum(plain) / len(plain)
    res["speedup_vs_plain"] = {r["settings"]: round(r["gen_tok_s"] / base_rate, 3)
                               for r in res["decoding"] if r["settings"] != "plain"}
    return res


def decoding_only(args) -> None:
    """`--decoding LABEL...`: only the decoding comparison, added to the result file's `limit.decoding_more`."""
    from skillopt.models.local import cpu_threads

    out = Path(args.out)
    doc = json.loads(out.read_text()) if out.is_file() else {"machine": machine(), "results": []}
    threads = args.limit_threads or cpu_threads()[0]
    reqs = quick_requests(args.concurrency + args.decoding_tasks + 1)[args.concurrency:]
    res = {"threads": threads, "uptime": [uptime()],
           "command": f"python perf/local_model.py --decoding {' '.join(repr(x) for x in args.decoding)} "
                      f"--decoding-tasks {args.decoding_tasks} --max-reply {args.max_reply}",
           **decoding(reqs, reqs[0][0], threads, args, args.decoding)}
    res["uptime"].append(uptime())
    doc.setdefault("limit", {}).setdefault("decoding_more", []).append(res)
    write_json(out, doc)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=["qwen2.5-coder-0.5b", "smollm2-135m"])
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--threads", type=int, nargs="+", default=[0])
    ap.add_argument("--no-preset", action="store_true", help="skip the `--preset quick` run")
    ap.add_argument("--preset-only", action="store_true", help="only the `--preset quick` run")
    ap.add_argument("--code", type=Path, default=REPO, help="the checkout whose skillopt runs the preset")
    ap.add_argument("--label", default="after", help="name of this preset measurement (before / after)")
    ap.add_argument("--repeats", type=int, default=1, help="preset runs")
    ap.add_argument("--out", default=str(REPO / "perf" / "results" / "local_model.json"))
    ap.add_argument("--serving", action="store_true", help="only the serving comparison of server settings")
    ap.add_argument("--tasks", type=int, default=60, help="--serving: quick-preset test tasks per measurement")
    ap.add_argument("--limit", action="store_true", help="llama.cpp's peak beside a run's requests; speculative "
                    "decoding (use --tasks 4 --gen 64)")
    ap.add_argument("--limit-threads", type=int, default=0, help="--limit: threads (0: what skillopt picks now)")
    ap.add_argument("--decoding-tasks", type=int, default=2, help="--limit: tasks per decoding setting")
    ap.add_argument("--worked-in-flight", default="1,2,4,8",
                    help="--limit: numbers of the best skill's requests in flight at once (two each per slot)")
    ap.add_argument("--max-reply", type=int, default=96, help="--limit: reply cap of the preset's requests")
    ap.add_argument("--decoding", nargs="+", choices=list(DECODING), help="only these decoding settings against "
                    "plain (added to limit.decoding_more)")
    args = ap.parse_args()
    if args.decoding:
        return decoding_only(args)
    if args.limit:
        return limit(args)
    if args.serving:
        return serving(args)
    if args.preset_only:
        return preset_only(args)
    doc = {"machine": machine(), "results": []}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    for model in args.models:
        for threads in args.threads:
            doc["results"].append(measure(model, args.gen, args.concurrency, threads))
            Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")  # after each, for long runs
            print(json.dumps(doc["results"][-1]), flush=True)
    if not args.no_preset:
        doc["preset_quick"] = {args.label: [preset_run(args.code) for _ in range(args.repeats)]}
        Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
        print(json.dumps(doc["preset_quick"]), flush=True)


def preset_only(args) -> None:
    """Add `--repeats` preset runs under `--label` to the result file, keeping what else it holds."""
    out = Path(args.out)
    doc = json.loads(out.read_text()) if out.is_file() else {"machine": machine(), "results": []}
    presets = doc.get("preset_quick") if isinstance(doc.get("preset_quick"), dict) else {}
    if "wall_s" in presets:  # the older single-run shape
        presets = {}
    runs = []
    for _ in range(args.repeats):
        runs.append({**preset_run(args.code), "code": str(args.code)})
        presets[args.label] = runs
        doc["preset_quick"] = presets
        out.write_text(json.dumps(doc, indent=2) + "\n")
        print(json.dumps({args.label: runs[-1]}), flush=True)


if __name__ == "__main__":
    main()
