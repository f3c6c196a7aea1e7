"""Check a run's token datasets against the local model that wrote them; writes one JSON result.

    python perf/token_data_check.py RUN_DIR MODEL [--recompute N]

RUN_DIR is a run folder whose `tokens/dataset-*` came from `--capture-tokens` on `local:MODEL`
(e.g. `skillopt eval ... --harness codex --target-model local:smollm2-135m --capture-tokens`).
It starts MODEL's llama.cpp server here and reports, with `skillopt.traces.token_checks`: rows
(model calls), rollouts, turns per rollout, decode mismatches, bad logprobs, turns that do not
extend the previous turn's ids, and for N sampled positions per row the largest gap between a
captured logprob and the server's recomputation (a different server process than the run's: its
threads may differ, so small gaps are expected there; tests/test_local_tokens.py compares on the
same server at 1e-3).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perf.common import machine, write_result  # noqa: E402
from skillopt.models.local import ensure_server  # noqa: E402
from skillopt.traces import token_checks  # noqa: E402
from skillopt.traces.export import run_rows  # noqa: E402
from skillopt.traces.llamacpp_tokens import LlamaCppTokens  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("model")
    ap.add_argument("--recompute", type=int, default=4, help="sampled positions per row (0: none)")
    args = ap.parse_args()
    rows = run_rows(args.run_dir)
    tok = LlamaCppTokens(ensure_server(args.model).base_url, timeout_s=1800)  # long prompts on a busy CPU
    check = token_checks.check_rows(rows, tok)
    gaps = []
    if args.recompute:
        for row in rows:
            found = token_checks.recompute_logprobs(row, tok, sample=args.recompute)
            gaps += [abs(x.captured - x.recomputed) for x in found if x.recomputed is not None]
    turns = Counter(r["rollout_key"] for r in rows)
    doc = {"run": str(args.run_dir), "model": args.model, "machine": machine(), **check.as_dict(),
           "rollouts": len(turns), "turns_per_rollout": sorted(turns.values()),
           "completion_tokens": sum(len(r["gold_completion_ids"]) for r in rows),
           "prompt_tokens_max": max((len(r["prompt_ids"]) for r in rows), default=0),
           "recomputed_positions": len(gaps), "recompute_max_abs_gap": max(gaps, default=None)}
    print(write_result(f"token_data_check-{args.model}", doc))
    print({k: v for k, v in doc.items() if k not in ("machine", "problems")})


if __name__ == "__main__":
    main()
