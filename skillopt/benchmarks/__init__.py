"""Benchmarks: tasks with deterministic splits, workspace preparation and scoring.

`get_benchmark("gsm8k", sizes)` or `get_benchmark("data/my_qa.jsonl", sizes)` is the way in;
`@benchmark("name")` registers a new one. Importing this package registers the built-ins
(`gsm8k`, `mmlu`, `arc-challenge`, `mbpp`, `humaneval`, `swe-local`, `swebench`) without reading
any data or importing an optional dependency.
"""

from skillopt.benchmarks import builtin as _builtin  # noqa: F401  (registers the built-ins)
from skillopt.benchmarks import builtin_more as _builtin_more  # noqa: F401  (the suite's QA families)
from skillopt.benchmarks import code as _code  # noqa: F401  (mbpp, humaneval)
from skillopt.benchmarks import swe_local as _swe_local  # noqa: F401  (swe-local)
from skillopt.benchmarks import harvested as _harvested  # noqa: F401  (harvest)
from skillopt.benchmarks import swebench_docker as _swebench_docker  # noqa: F401  (swebench)
from skillopt.benchmarks.base import (
    SPLITS,
    Benchmark,
    RolloutOutput,
    Score,
    Split,
    SplitSizes,
    Task,
    assign_splits,
    data_hash,
)
from skillopt.benchmarks.qa import QABenchmark, load_jsonl, make_task
from skillopt.benchmarks.registry import (
    BenchmarkInfo,
    benchmark,
    benchmark_info,
    get_benchmark,
    list_benchmarks,
)
from skillopt.benchmarks.scorers import (
    choice_match,
    exact_match,
    extract_answer,
    extract_choice,
    f1_match,
    find_answer,
    normalize_text,
    numeric_match,
    parse_number,
    token_f1,
)

__all__ = [
    "SPLITS", "Benchmark", "BenchmarkInfo", "QABenchmark", "RolloutOutput", "Score", "Split",
    "SplitSizes", "Task", "assign_splits", "benchmark", "benchmark_info", "choice_match",
    "data_hash", "exact_match", "extract_answer", "extract_choice", "f1_match", "find_answer",
    "get_benchmark", "list_benchmarks", "load_jsonl", "make_task", "normalize_text",
    "numeric_match", "parse_number", "token_f1",
]
