"""Embedded local model: start time, prompt and generation tokens/s (llama.cpp's own timings),
and the throughput of concurrent requests over the parallel slots.

Usage: python perf/local_model.py [--models qwen2.5-coder-0.5b smollm2-135m] [--gen 128]
                                  [--threads 0 1] [--out perf/results/local_model.json]

`--threads 0` is skillopt's default (`local.cpu_threads()`). On a shared machine the numbers swing with the
load average, which is recorded next to each result.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from skillopt.models.local import LocalServer, weights_path

# A skill-sized system prompt (~1,000 tokens) and a short task, like a chat-harness rollout.
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
            # warm prompt: the skill prefix is cached, only the task is new
            warm = _chat(client, base, "Task 2: 17 boxes of 12 eggs. How many eggs?", gen)["timings"]
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
        "warm_cached_tokens": warm["cache_n"], "warm_prompt_ms": round(warm["prompt_ms"], 1),
        "warm_gen_tok_s": round(warm["predicted_per_second"], 1),
        "concurrent_requests": concurrency, "concurrent_gen_tokens": gen_tokens,
        "concurrent_wall_s": round(wall, 2), "concurrent_gen_tok_s": round(gen_tokens / wall, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=["qwen2.5-coder-0.5b", "smollm2-135m"])
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--threads", type=int, nargs="+", default=[0])
    ap.add_argument("--out", default=str(REPO / "perf" / "results" / "local_model.json"))
    args = ap.parse_args()
    doc = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform()}, "results": []}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    for model in args.models:
        for threads in args.threads:
            doc["results"].append(measure(model, args.gen, args.concurrency, threads))
            Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")  # after each, for long runs
            print(json.dumps(doc["results"][-1]), flush=True)


if __name__ == "__main__":
    main()
