"""An example skillopt plugin: the `capitals` benchmark and the `city` scorer.

    pip install ./examples/plugin
    skillopt benchmarks list                 # shows capitals (plugin)
    skillopt run --benchmark capitals --harness user-prompt ...
    skillopt run --benchmark my.jsonl --set benchmark_options.scorer=city ...
"""

from __future__ import annotations

from skillopt.benchmarks.base import SplitSizes, Task
from skillopt.benchmarks.custom import PythonBenchmark

CAPITALS = {"France": "Paris", "Japan": "Tokyo", "Kenya": "Nairobi", "Peru": "Lima", "Canada": "Ottawa",
            "Egypt": "Cairo", "Norway": "Oslo", "Chile": "Santiago", "India": "New Delhi", "Spain": "Madrid",
            "Ghana": "Accra", "Vietnam": "Hanoi"}


def city_scorer(strict: bool = False):
    """The `city` scorer: the reply's last line names the expected city (case-insensitive unless strict)."""

    def score(task: Task, output: str):
        last = (output.strip().splitlines() or [""])[-1].removeprefix("Answer:").strip().rstrip(".")
        expected = task.answers[0]
        same = last == expected if strict else last.lower() == expected.lower()
        return (1.0 if same else 0.0), ("correct" if same else f"expected {expected}, got {last or 'nothing'}")

    score.version = f"city-1-{strict}"  # a new version never reuses rollouts scored by the old one
    return score


def capitals(sizes: SplitSizes, strict: bool = False) -> PythonBenchmark:
    """capital cities of 12 countries, scored by the city scorer"""
    tasks = [Task(id=f"capital-{country.lower()}", prompt=f"What is the capital of {country}? "
                                                          "End with a line 'Answer: <city>'.", answers=(city,))
             for country, city in CAPITALS.items()]
    return PythonBenchmark("capitals", tasks, city_scorer(strict), sizes)
