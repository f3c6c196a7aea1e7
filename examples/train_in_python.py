"""Train and compare a skill from Python: a task list, a scoring function, three calls.

    python examples/train_in_python.py                                   # embedded local models, offline
    python examples/train_in_python.py --target-model openai:gpt-5-mini --optimizer-model openai:gpt-5

The tasks are small word problems made here; the scorer is a plain Python function that returns
(score, feedback): the feedback is what the optimizer reads about a failure. At the end, the run's
rollouts and decisions are pandas DataFrames (pip install "skillopt[analysis]").
"""

from __future__ import annotations

import argparse
import random
import re

import skillopt


def make_tasks(n: int, seed: int = 0) -> list[dict]:
    """Word problems in the JSONL QA format: id, question, answer."""
    rng = random.Random(seed)
    tasks = []
    for i in range(n):
        boxes, per_box, eaten = rng.randint(2, 9), rng.randint(3, 12), rng.randint(1, 5)
        tasks.append({"id": f"apples-{i:03d}",
                      "question": f"A shop has {boxes} boxes of {per_box} apples. Customers eat {eaten} apples. "
                                  f"How many apples are left?",
                      "answer": str(boxes * per_box - eaten)})
    return tasks


def final_number(task: skillopt.Task, output: str) -> tuple[float, str]:
    """1 when the reply's last number is the answer; the feedback says what was expected."""
    numbers = re.findall(r"-?\d+", output.replace(",", ""))
    expected = task.answers[0]
    if not numbers:
        return 0.0, f"no number in the reply (expected {expected}); end with 'Answer: <number>'"
    if numbers[-1] == expected:
        return 1.0, "correct"
    return 0.0, f"expected {expected}, got {numbers[-1]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target-model", help="e.g. openai:gpt-5-mini (default: see skillopt run --help)")
    parser.add_argument("--optimizer-model", help="e.g. openai:gpt-5")
    parser.add_argument("--runs-dir", default="runs")
    parser.add_argument("--tasks", type=int, default=40)
    args = parser.parse_args()

    run = skillopt.train(
        tasks=make_tasks(args.tasks), scorer=final_number, benchmark="apples",
        target_model=args.target_model, optimizer_model=args.optimizer_model, runs_dir=args.runs_dir,
        epochs=1, batch_size=8, train_size=8, val_size=20, test_size=args.tasks - 28, progress=True)
    print(f"run {run.run_id}: {run.status}")
    for role in ("seed", "best"):
        print(f"  {role}: test {run.score(role, 'test')}")

    cmp = skillopt.compare(run.seed_ref, run.best_ref, runs_dir=args.runs_dir, splits=["test"])
    for row in cmp.paired:
        if row.metric == "hard":  # the paired lift, as the run's summary and the report print it
            print(f"best - seed on {row.split}: {row.lift.text()}")

    try:
        rollouts = skillopt.rollouts_df(run)
        decisions = skillopt.decisions_df(run)
    except skillopt.BadInput as e:  # pandas is an extra
        print(e)
        return
    print(rollouts.groupby(["version", "split"]).hard.mean().round(3).to_string())
    print(decisions[["step", "candidate", "origin", "status", "p_value"]].to_string(index=False))


if __name__ == "__main__":
    main()
