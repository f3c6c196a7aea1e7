"""The gate by simulation: false accepts of a no-op edit, power for a +15-point edit, and what a
decision costs, against scoring the whole validation split (the old default).

Scenarios (skillopt/optimizer/sequential_test_sim.py): 40 validation tasks unless said otherwise, task
difficulties ~ Beta(0.5, 0.8) (or coin flips), deterministic targets (temperature 0; `stability`:
how much a wording change re-rolls a task's outcome) or sampled ones (both skills drawn afresh
per pair), the default gate settings. Seeded: the same command writes the same numbers.

Usage: python perf/gate_sim.py [--decisions 2000] [--out perf/results/gate_sim.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from skillopt.optimizer.sequential_test import SequentialGate, SignTest  # noqa: E402
from skillopt.optimizer.sequential_test_sim import Scenario, simulate  # noqa: E402

SCENARIOS = [
    # no-op edits: the false-accept rate
    Scenario("no-op, coin-flip tasks, sampled", mode="sampled", beta=None),
    Scenario("no-op, sampled", mode="sampled"),
    Scenario("no-op, deterministic, stability 0.9", stability=0.9),
    Scenario("no-op, deterministic, stability 0.5", stability=0.5),
    Scenario("no-op, sampled, 3 trials", mode="sampled", trials=3),
    # real improvements: the power
    Scenario("+15, deterministic, stability 0.9", effect=0.15, stability=0.9),
    Scenario("+15, deterministic, stability 1.0", effect=0.15, stability=1.0),
    Scenario("+15, sampled", effect=0.15, mode="sampled"),
    Scenario("+15, sampled, 3 trials", effect=0.15, mode="sampled", trials=3),
    Scenario("+15, deterministic, 80 tasks", tasks=80, effect=0.15, stability=0.9),
    Scenario("+30, deterministic, stability 0.9", effect=0.30, stability=0.9),
    # two candidates gated in a step (`gate.per_step` 2), each at alpha / 2: what a gated candidate keeps
    Scenario("no-op, deterministic, stability 0.9, alpha / 2", stability=0.9, share=2),
    Scenario("+10, deterministic, stability 0.9", effect=0.10, stability=0.9),
    Scenario("+10, deterministic, stability 0.9, alpha / 2", effect=0.10, stability=0.9, share=2),
    Scenario("+15, deterministic, stability 0.9, alpha / 2", effect=0.15, stability=0.9, share=2),
    Scenario("+30, deterministic, stability 0.9, alpha / 2", effect=0.30, stability=0.9, share=2),
    # a harmful edit
    Scenario("-15, deterministic, stability 0.9", effect=-0.15, stability=0.9, beta=(0.8, 0.5)),
]


def ceiling(tasks: int = 40, effect: float = 0.15) -> float:
    """The most a sign test (conditional on the discordant pairs) can do, with no churn: the
    improved tasks are Binomial(tasks, effect) and an exact one-sided 5% sign test needs at least 5
    of them (2^-5 < 0.05 < 2^-4). The gate's final look is unconditional and is not bound by it."""
    from math import comb

    return 1 - sum(comb(tasks, k) * effect ** k * (1 - effect) ** (tasks - k) for k in range(5))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--decisions", type=int, default=2000)
    ap.add_argument("--out", default=str(REPO / "perf" / "results" / "gate_sim.json"))
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows = []
    for i, s in enumerate(SCENARIOS):
        r = simulate(s, decisions=args.decisions, seed=100 + i)
        full = s.tasks * s.trials * (2 if s.mode == "sampled" else 1)
        rows.append({**r.model_dump(), "saving_vs_full_split": round(1 - r.rollouts_per_decision / full, 3),
                     "saving_vs_old_default": round(1 - r.rollouts_per_decision / s.tasks, 3)})
        print(f"{s.name:42s} accept {r.accept_rate:.3f}  pairs {r.pairs_per_decision:5.1f}  "
              f"rollouts {r.rollouts_per_decision:6.1f}  {r.stops}")
    test = SignTest(planned=40)
    out = {
        "test": SequentialGate(test).summary(1, 0).test,
        "settings": {k: v for k, v in test.__dict__.items() if k != "planned"},
        "decisions_per_scenario": args.decisions,
        "sign_test_power_ceiling_15_points_40_tasks": round(ceiling(), 4),
        "scenarios": rows,
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "seconds": round(time.perf_counter() - t0, 1),
        "date": time.strftime("%Y-%m-%d"),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
