"""What compare's scan of every run's rollouts costs: `store.reuse.find_rollouts` (each line's key
parsed as JSON, the record only for a wanted key) against the byte slice it replaced (`line[8:72]`),
on a runs folder of copies of the run_v1 fixture's records, each with its own key.

    python perf/rollout_scan.py [--lines 50000] [--runs 5]   -> perf/results/rollout_scan.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perf.common import machine, write_result  # noqa: E402
from skillopt.store.reuse import find_rollouts  # noqa: E402
from skillopt.store.schema import RolloutRecord  # noqa: E402

FIXTURE = Path(__file__).resolve().parents[1] / "tests/fixtures/run_v1/runs-dir/legacy/rollouts.jsonl"


def sliced(runs_dir: Path, keys: set[str]) -> dict[str, tuple[str, RolloutRecord]]:
    """The scan as it was before issue 31 (the key sliced out of the line's first bytes)."""
    found: dict[str, tuple[str, RolloutRecord]] = {}
    for path in sorted(runs_dir.glob("*/rollouts.jsonl")):
        with path.open(encoding="utf-8") as f:
            for line in f:
                key = line[8:72] if line.startswith('{"key":"') else None
                if key is not None and (key not in keys or key in found):
                    continue
                try:
                    rec = RolloutRecord.model_validate_json(line)
                except ValueError:
                    continue
                if rec.key in keys and rec.key not in found and not rec.errored:
                    found[rec.key] = (path.parent.name, rec)
    return found


def build(root: Path, lines: int, runs: int) -> list[str]:
    base = [json.loads(x) for x in FIXTURE.read_text(encoding="utf-8").splitlines() if x.strip()]
    keys = []
    for r in range(runs):
        run = root / f"run-{r}"
        run.mkdir()
        with (run / "rollouts.jsonl").open("w", encoding="utf-8") as f:
            for i in range(lines // runs):
                rec = dict(base[i % len(base)], key=hashlib.sha256(f"{r}-{i}".encode()).hexdigest())
                keys.append(rec["key"])
                f.write(json.dumps(rec, separators=(",", ":"), ensure_ascii=False) + "\n")
    return keys


def best_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=50_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        keys = build(root, args.lines, args.runs)
        wanted = set(keys[:: max(1, len(keys) // 200)])  # 200 keys spread over every run, as a compare asks
        assert find_rollouts(root, wanted).keys() == sliced(root, wanted).keys()
        parsed_s = best_of(lambda: find_rollouts(root, wanted), args.repeat)
        sliced_s = best_of(lambda: sliced(root, wanted), args.repeat)
    doc = {"lines": len(keys), "runs": args.runs, "wanted": len(wanted), "parsed_s": round(parsed_s, 3),
           "sliced_s": round(sliced_s, 3), "machine": machine()}
    print(json.dumps({k: v for k, v in doc.items() if k != "machine"}))
    write_result("rollout_scan", doc)


if __name__ == "__main__":
    main()
