"""Which mutations make tasks: `screen` tries candidates in parallel work copies and keeps those that
make between 1 and `max_failing` tests fail (no hang, at most one per function) and whose failing
tests can be hidden from the base commit (`hide_tests`).
"""

from __future__ import annotations

import ast
import re
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from skillopt.benchmarks.make_swe.mutate import Mutation
from skillopt.benchmarks.make_swe.package import Package, Progress, SuiteRun, run_tests


def locate_test(test_id: str) -> tuple[str, list[str]]:
    """`path::Class::test_x[param]` -> (path, [Class, test_x])."""
    path, *names = test_id.split("::")
    return path, [n.split("[", 1)[0] for n in names]


def hide_tests(root: Path, test_ids: set[str]) -> dict[str, str] | None:
    """The test files' text with the functions of `test_ids` removed; None when one is not defined
    directly in its own file (inherited, generated...)."""
    by_file: dict[str, set[tuple[str, ...]]] = {}
    for tid in test_ids:
        path, names = locate_test(tid)
        by_file.setdefault(path, set()).add(tuple(names))
    out = {}
    for rel, wanted in by_file.items():
        file = root / rel
        if not file.is_file():
            return None
        text = file.read_text(encoding="utf-8")
        tree = ast.parse(text)
        spans = []
        for names in wanted:
            node = _find_def(tree.body, list(names))
            if node is None:
                return None
            spans.append(node)
        new = _remove_defs(text, tree, spans)
        try:
            ast.parse(new)
        except SyntaxError:
            return None
        out[rel] = new
    return out


def _find_def(body: list[ast.stmt], names: list[str]) -> ast.AST | None:
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == names[0]:
            if len(names) == 1:
                return node if not isinstance(node, ast.ClassDef) else None
            return _find_def(node.body, names[1:]) if isinstance(node, ast.ClassDef) else None
    return None


def _remove_defs(text: str, tree: ast.Module, nodes: list[ast.AST]) -> str:
    lines = text.splitlines(keepends=True)
    drop: set[int] = set()
    for node in nodes:
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        drop.update(range(start - 1, node.end_lineno))
        after = node.end_lineno
        while after < len(lines) and not lines[after].strip() and start >= 2 and not lines[start - 2].strip():
            drop.add(after)
            after += 1
    # a class left with no statement gets `pass`
    fills: dict[int, str] = {}
    for cls in ast.walk(tree):
        if isinstance(cls, ast.ClassDef) and all(set(range(s.lineno - 1, s.end_lineno)) <= drop for s in cls.body):
            indent = re.match(r"\s*", lines[cls.body[0].lineno - 1]).group(0)
            fills[cls.body[0].lineno - 1] = f"{indent}pass\n"
    return "".join(fills.get(i, "") if i in drop else ln for i, ln in enumerate(lines))


# ---------------------------------------------------------------- screening the mutations


@dataclass
class Kept:
    mutation: Mutation
    failing: set[str]


def screen(pkg: Package, baseline: SuiteRun, candidates: list[Mutation], count: int, max_failing: int,
           timeout_s: float, jobs: int, progress: Progress) -> list[Kept]:
    """Try candidates in order (in parallel work copies); keep the first `count` that qualify."""
    tmp = Path(tempfile.mkdtemp(prefix="make-swe-work-"))
    works = []
    for i in range(max(1, jobs)):
        shutil.copytree(pkg.root, tmp / f"w{i}")
        works.append(tmp / f"w{i}")
    kept: list[Kept] = []
    functions: set[tuple[str, str]] = set()
    failing_sets: list[set[str]] = []
    broken = baseline.failing | baseline.duplicates

    def trial(args: tuple[Path, Mutation]) -> tuple[Mutation, SuiteRun]:
        work, m = args
        original = (pkg.root / m.file).read_text(encoding="utf-8")
        (work / m.file).write_text(m.apply(original), encoding="utf-8")
        try:
            return m, run_tests(work, pkg.test_paths, pkg.test_env, timeout_s)
        finally:
            (work / m.file).write_text(original, encoding="utf-8")

    try:
        with ThreadPoolExecutor(len(works)) as pool:
            queue = [m for m in candidates]
            while queue and len(kept) < count:
                batch = []
                while queue and len(batch) < len(works):
                    m = queue.pop(0)
                    if (m.file, m.function) not in functions:
                        batch.append(m)
                for m, run in pool.map(trial, zip(works, batch, strict=False)):
                    failing = run.failing - broken
                    ok = (not run.timed_out and 1 <= len(failing) <= max_failing
                          and all("::" in t for t in run.failing) and run.passing
                          and (m.file, m.function) not in functions and failing not in failing_sets
                          and len({tuple(locate_test(t)[1]) for t in failing}) <= 3
                          and len(kept) < count)
                    if ok and hide_tests(pkg.root, failing) is not None:
                        kept.append(Kept(m, failing))
                        functions.add((m.file, m.function))
                        failing_sets.append(failing)
                        progress(f"  kept {len(kept)}/{count}: {m.describe((pkg.root / m.file).read_text())} "
                                 f"({len(failing)} failing)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return kept
