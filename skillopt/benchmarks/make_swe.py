"""Make swe-local tasks from a real pure-Python package: `skillopt benchmarks make-swe --package NAME`.

1. Fetch the package's sdist (`pip download --no-binary :all: --no-deps NAME==VER`) and unpack it;
   its licence (from PKG-INFO) is recorded on every task and must allow redistribution.
2. Run its own test suite with pytest: the baseline (tests failing here are ignored).
3. Enumerate small AST mutations of the package's code inside functions (flip a comparison,
   `and`/`or`, off-by-one constants, `+ 1`/`- 1`, negate or drop a branch, drop a guard,
   `True`/`False` returns, `min`/`max`, drop a `not`), each a minimal text edit. In a seeded
   order, keep those that make between 1 and `max_failing` tests fail (no import errors, no hang),
   at most one per function.
4. Per kept mutation, a task in the SWE-bench row shape: the base commit = the mutated code with the
   failing tests' functions removed (a root commit with fixed metadata); `patch` (gold) = the reverse
   mutation; `test_patch` = the removed tests; FAIL_TO_PASS / PASS_TO_PASS from running the test
   patch's files without and with the gold patch; the problem statement from the failing output
   (optionally rewritten by a model).
5. Check each task as CI does (gold resolves, an empty patch does not), then write one git bundle
   per package version (`<name>-<version>.bundle`, a branch per task) next to `tasks.jsonl`, whose
   rows for that package version are replaced.
"""

from __future__ import annotations

import ast
import json
import random
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from email.parser import HeaderParser
from pathlib import Path

from skillopt.benchmarks.sandbox import ResourceLimits, minimal_env, run_limited
from skillopt.benchmarks.swe_grading import SweInstance
from skillopt.git import git
from skillopt.benchmarks.swe_local import (
    SHIPPED_TASKS,
    apply_patch,
    clone_at,
    fresh_repository,
    grade_local,
    reset_test_files,
)
from skillopt.errors import BadInput

REDISTRIBUTABLE = ("MIT", "BSD", "Apache", "ISC", "PSF", "Python Software Foundation", "Unlicense", "0BSD", "Zlib")
TEST_CMD = ["python", "-m", "pytest", "-rA", "-p", "no:cacheprovider", "--tb=short"]
SKIP_DIRS = {"docs", "doc", "examples", "example", "benchmarks", "bench", ".git", "build", "dist"}
Progress = Callable[[str], None]


# ---------------------------------------------------------------- mutations


@dataclass(frozen=True)
class Mutation:
    """One text edit: replace [start, end) (byte offsets of the UTF-8 source) by `new`."""

    file: str
    start: int
    end: int
    new: str
    operator: str
    function: str  # the enclosing function's qualified name
    line: int

    def apply(self, source: str) -> str:
        data = source.encode()
        return (data[: self.start] + self.new.encode() + data[self.end :]).decode()

    def describe(self, source: str) -> str:
        old = source.encode()[self.start : self.end].decode()
        return f"{self.operator} in {self.function} ({self.file}:{self.line}): {old.strip()[:60]!r} -> {self.new.strip()[:60]!r}"


_CMP = {ast.Lt: "<=", ast.LtE: "<", ast.Gt: ">=", ast.GtE: ">", ast.Eq: "!=", ast.NotEq: "==",
        ast.Is: "is not", ast.IsNot: "is", ast.In: "not in", ast.NotIn: "in"}
_CMP_TEXT = {ast.Lt: r"<(?!=)", ast.LtE: r"<=", ast.Gt: r">(?!=)", ast.GtE: r">=", ast.Eq: r"==",
             ast.NotEq: r"!=", ast.Is: r"\bis\b(?!\s+not\b)", ast.IsNot: r"\bis\s+not\b",
             ast.In: r"(?<!not )\bin\b", ast.NotIn: r"\bnot\s+in\b"}


class _Finder(ast.NodeVisitor):
    def __init__(self, rel: str, source: str):
        self.rel, self.source = rel, source
        self.lines = source.encode().splitlines(keepends=True)
        self.offsets = [0]
        for ln in self.lines:
            self.offsets.append(self.offsets[-1] + len(ln))
        self.stack: list[str] = []
        self.found: list[Mutation] = []

    def pos(self, line: int, col: int) -> int:
        return self.offsets[line - 1] + col

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self.pos(node.lineno, node.col_offset), self.pos(node.end_lineno, node.end_col_offset)

    def add(self, start: int, end: int, new: str, op: str, line: int) -> None:
        if self.stack:
            self.found.append(Mutation(self.rel, start, end, new, op, ".".join(self.stack), line))

    def text(self, start: int, end: int) -> str:
        return self.source.encode()[start:end].decode()

    def gap_token(self, a: ast.AST, b: ast.AST, pattern: str) -> tuple[int, int] | None:
        """The one match of `pattern` between two nodes (nothing else there but brackets and space)."""
        start, end = self.span(a)[1], self.span(b)[0]
        gap = self.text(start, end)
        if "#" in gap:
            return None
        hits = list(re.finditer(pattern, gap))
        if len(hits) != 1:
            return None
        return start + len(gap[: hits[0].start()].encode()), start + len(gap[: hits[0].end()].encode())

    # -- scopes
    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.stack.append(node.name)
        self._blocks(node)
        for stmt in node.body:
            self.visit(stmt)  # not the decorators, arguments' defaults or annotations
        self.stack.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.stack.append(node.name)
        for stmt in node.body:
            self.visit(stmt)
        self.stack.pop()

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)

    # -- expressions
    def visit_Compare(self, node: ast.Compare) -> None:
        left = node.left
        for op, right in zip(node.ops, node.comparators, strict=True):
            where = self.gap_token(left, right, _CMP_TEXT[type(op)])
            if where:
                self.add(*where, _CMP[type(op)], "flip-comparison", node.lineno)
            left = right
        self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        word = "and" if isinstance(node.op, ast.And) else "or"
        where = self.gap_token(node.values[0], node.values[1], rf"\b{word}\b")
        if where:
            self.add(*where, "or" if word == "and" else "and", "swap-and-or", node.lineno)
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, (ast.Add, ast.Sub)) and isinstance(node.right, ast.Constant) \
                and type(node.right.value) is int:
            sign = r"\+" if isinstance(node.op, ast.Add) else "-"
            where = self.gap_token(node.left, node.right, sign)
            if where:
                self.add(*where, "-" if isinstance(node.op, ast.Add) else "+", "swap-plus-minus", node.lineno)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if type(node.value) is int and abs(node.value) < 1000:
            start, end = self.span(node)
            if self.text(start, end).isdigit():
                self.add(start, end, str(node.value + 1), "off-by-one", node.lineno)
                if node.value > 0:
                    self.add(start, end, str(node.value - 1), "off-by-one", node.lineno)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        if isinstance(node.op, ast.Not):
            start, end = self.span(node)
            rest = self.text(start, end)
            if rest.startswith(("not ", "not(")):
                self.add(start, end, rest[3:].lstrip(), "drop-not", node.lineno)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id in ("min", "max"):
            self.add(*self.span(node.func), "max" if node.func.id == "min" else "min", "swap-min-max", node.lineno)
        self.generic_visit(node)

    def visit_Return(self, node: ast.Return) -> None:
        if isinstance(node.value, ast.Constant) and type(node.value.value) is bool:
            self.add(*self.span(node.value), str(not node.value.value), "flip-return", node.lineno)
            return
        self.generic_visit(node)

    # -- statements
    def visit_If(self, node: ast.If) -> None:
        if _is_main_guard(node):
            return
        start, end = self.span(node.test)
        self.add(start, end, f"not ({self.text(start, end)})", "negate-condition", node.lineno)
        if node.orelse and not (len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If)
                                and self._starts_with(node.orelse[0], "elif")):
            first = node.orelse[0].lineno
            else_line = first - 1
            while else_line > node.lineno and not self.lines[else_line - 1].strip():
                else_line -= 1
            if self.lines[else_line - 1].strip() == b"else:":
                s, e = self.offsets[else_line - 1], self.offsets[node.orelse[-1].end_lineno]
                self.add(s, e, "", "drop-else", else_line)
        self.generic_visit(node)

    def _starts_with(self, node: ast.AST, word: str) -> bool:
        return self.lines[node.lineno - 1].strip().startswith(word.encode())

    def generic_visit(self, node: ast.AST) -> None:
        self._blocks(node)
        super().generic_visit(node)

    def _blocks(self, node: ast.AST) -> None:
        """Statements that can be dropped from a block of two or more."""
        for name in ("body", "orelse", "finalbody"):
            block = getattr(node, name, None)
            if isinstance(block, list) and len(block) > 1 and all(isinstance(s, ast.stmt) for s in block):
                for stmt in block:
                    if self._droppable(stmt):
                        s, e = self.offsets[stmt.lineno - 1], self.offsets[stmt.end_lineno]
                        self.add(s, e, "", "drop-statement", stmt.lineno)

    def _droppable(self, stmt: ast.stmt) -> bool:
        """A guard (`if ...: return/raise/continue/break`, no else) or an augmented assignment,
        alone on its lines."""
        guard = (isinstance(stmt, ast.If) and not stmt.orelse and len(stmt.body) == 1
                 and isinstance(stmt.body[0], (ast.Return, ast.Raise, ast.Continue, ast.Break)))
        if not (guard or isinstance(stmt, ast.AugAssign)):
            return False
        first, last = self.lines[stmt.lineno - 1], self.lines[stmt.end_lineno - 1]
        before = first[: stmt.col_offset]
        after = last[stmt.end_col_offset:].strip()
        return not before.strip() and (not after or after.startswith(b"#"))


def _is_main_guard(node: ast.If) -> bool:
    text = ast.unparse(node.test)
    return "__name__" in text or "TYPE_CHECKING" in text


def find_mutations(rel: str, source: str) -> list[Mutation]:
    """Every candidate mutation of one module (inside functions only) that still parses and
    changes the AST."""
    tree = ast.parse(source)
    finder = _Finder(rel, source)
    finder.visit(tree)
    before = ast.dump(tree)
    out, seen = [], set()
    for m in finder.found:
        key = (m.start, m.end, m.new)
        if key in seen:
            continue
        seen.add(key)
        try:
            after = ast.dump(ast.parse(m.apply(source)))
        except (SyntaxError, ValueError):
            continue
        if after != before:
            out.append(m)
    return out


def interleave(mutations: list[Mutation], seed: int) -> list[Mutation]:
    """A seeded order that takes each kind of mutation in turn, so no operator crowds the others out."""
    rng = random.Random(seed)
    groups: dict[str, list[Mutation]] = {}
    for m in mutations:
        groups.setdefault(m.operator, []).append(m)
    for ms in groups.values():
        rng.shuffle(ms)
    order = sorted(groups)
    rng.shuffle(order)
    out = []
    while any(groups.values()):
        for op in order:
            if groups[op]:
                out.append(groups[op].pop())
    return out


# ---------------------------------------------------------------- the package


@dataclass
class Package:
    name: str
    version: str
    root: Path  # the unpacked, pristine sdist
    license: str
    repo: str  # owner/name on GitHub when the metadata says so, else pypi/<name>
    import_root: str  # "." or "src"
    test_paths: list[str] = field(default_factory=list)
    source_files: list[str] = field(default_factory=list)

    @property
    def test_env(self) -> dict[str, str]:
        return {"PYTHONPATH": self.import_root, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def fetch_sdist(name: str, version: str | None, dest: Path) -> Path:
    spec = f"{name}=={version}" if version else name
    res = subprocess.run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "-q",
                          "--disable-pip-version-check", spec, "-d", str(dest)], capture_output=True, text=True,
                         timeout=600)
    files = [p for p in dest.iterdir() if p.suffix in (".gz", ".zip", ".bz2")]
    if res.returncode != 0 or not files:
        why = (res.stderr.strip().splitlines() or ["no sdist downloaded"])[-1]
        raise BadInput(f"could not download the sdist of {spec}: {why}")
    return files[0]


def unpack(archive: Path, dest: Path) -> Path:
    try:
        if archive.suffix == ".zip":
            with zipfile.ZipFile(archive) as z:
                z.extractall(dest)
        else:
            with tarfile.open(archive) as t:
                t.extractall(dest, filter="data")
    except (tarfile.TarError, zipfile.BadZipFile, OSError) as e:
        raise BadInput(f"{archive.name} is not a readable sdist: {e}") from None
    tops = [p for p in dest.iterdir() if p.is_dir()]
    if len(tops) != 1:
        raise BadInput(f"{archive.name}: expected one top folder in the sdist")
    for junk in list(tops[0].rglob("*.egg-info")) + list(tops[0].rglob("__pycache__")):
        shutil.rmtree(junk, ignore_errors=True)
    return tops[0]


def _license(meta) -> str:
    value = meta.get("License-Expression") or ""
    if not value:
        first = (meta.get("License") or "").strip().splitlines()
        value = first[0] if first and len(first[0]) < 60 else ""
    if not value:
        classifiers = [c.split("::")[-1].strip() for c in meta.get_all("Classifier") or [] if c.startswith("License")]
        value = classifiers[0] if classifiers else ""
    return value.strip()


def _repo(meta, name: str) -> str:
    urls = [meta.get("Home-page") or ""] + [u.split(",", 1)[-1].strip() for u in meta.get_all("Project-URL") or []]
    for url in urls:
        m = re.match(r"https?://github\.com/([\w.-]+)/([\w.-]+?)(?:\.git)?/?$", url.strip())
        if m:
            return f"{m.group(1)}/{m.group(2)}"
    return f"pypi/{name}"


def _is_test_file(rel: Path) -> bool:
    return rel.name.startswith("test_") or rel.name.endswith("_test.py") or "tests" in rel.parts or "test" in rel.parts


def inspect_package(root: Path, name: str, tests: list[str] | None = None, license: str | None = None) -> Package:
    pkg_info = root / "PKG-INFO"
    if not pkg_info.is_file():
        raise BadInput(f"{root.name}: no PKG-INFO: is this an sdist?")
    meta = HeaderParser().parsestr(pkg_info.read_text(encoding="utf-8", errors="replace"))
    lic = license or _license(meta)
    if not lic or not any(word.lower() in lic.lower() for word in REDISTRIBUTABLE):
        raise BadInput(f"{name}: licence {lic or 'unknown'!r} is not one known to allow redistribution "
                       f"({', '.join(REDISTRIBUTABLE)}); pass --license if you know better")
    if not [p for p in root.iterdir() if p.name.upper().startswith(("LICEN", "COPYING"))]:
        raise BadInput(f"{name}: the sdist has no LICENSE file to ship with the code")
    import_root = "src" if (root / "src").is_dir() else "."
    files = sorted(p.relative_to(root) for p in root.rglob("*.py")
                   if not (set(p.relative_to(root).parts[:-1]) & SKIP_DIRS))
    test_files = [f for f in files if _is_test_file(f)]
    if tests:
        test_paths = tests
    else:
        test_paths = sorted({str(f) if len(f.parts) == 1 else _test_dir(f) for f in test_files
                             if f.name.startswith("test_") or f.name.endswith("_test.py")})
    if not test_paths:
        raise BadInput(f"{name}: the sdist has no tests (test_*.py); pick a package whose sdist ships them")
    sources = _source_files(root, files, import_root, name)
    return Package(name, meta.get("Version") or "0", root, lic, _repo(meta, name), import_root,
                   test_paths, sources)


def _source_files(root: Path, files: list[Path], import_root: str, name: str) -> list[str]:
    """The package's own modules: under the import root, not tests, not build scripts; a top-level
    module only when it is the package itself."""
    base = root / import_root
    out = []
    for f in files:
        full = root / f
        if _is_test_file(f) or f.name in ("setup.py", "conftest.py", "noxfile.py") or not full.is_relative_to(base):
            continue
        if len(full.relative_to(base).parts) == 1 and f.stem.lower() != name.replace("-", "_").lower():
            continue
        out.append(str(f))
    return out


def _test_dir(f: Path) -> str:
    parts = f.parts
    i = max(i for i, p in enumerate(parts) if p in ("tests", "test") or i == len(parts) - 2)
    return str(Path(*parts[: i + 1]))


# ---------------------------------------------------------------- running the tests


@dataclass(frozen=True)
class SuiteRun:
    status: dict[str, str]  # test id -> PASSED / FAILED / ERROR / SKIPPED / XFAIL
    output: str
    timed_out: bool
    duplicates: frozenset[str] = frozenset()  # ids the log parser folds together (spaces in ids)

    @property
    def failing(self) -> set[str]:
        return {t for t, s in self.status.items() if s in ("FAILED", "ERROR")}

    @property
    def passing(self) -> set[str]:
        return {t for t, s in self.status.items() if s in ("PASSED", "XFAIL")}


def parse_pytest(output: str) -> tuple[dict[str, str], frozenset[str]]:
    """swebench's pytest parser over the output, plus the ids it saw more than once."""
    from swebench.harness.log_parsers import PARSER_REGISTRY

    parse = PARSER_REGISTRY["parse_log_pytest"]
    counts: dict[str, int] = {}
    for line in output.splitlines():
        for key in parse(line, None):
            counts[key] = counts.get(key, 0) + 1
    return parse(output, None), frozenset(k for k, n in counts.items() if n > 1)


def run_tests(repo: Path, paths: list[str], env: dict[str, str], timeout_s: float,
              extra: tuple[str, ...] = ()) -> SuiteRun:
    home = Path(tempfile.mkdtemp(prefix="make-swe-home-"))
    try:
        cmd = [sys.executable, *TEST_CMD[1:], *extra, *paths]
        run = run_limited(cmd, cwd=repo, timeout_s=timeout_s, env=minimal_env(home, env),
                          limits=ResourceLimits(memory_mb=4096))
    finally:
        shutil.rmtree(home, ignore_errors=True)
    status, dups = parse_pytest(run.output)
    return SuiteRun(status, run.output, run.timed_out, dups)


# ---------------------------------------------------------------- hiding tests


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


# ---------------------------------------------------------------- the problem statement

_SECTION = re.compile(r"^_{3,} (.+?) _{3,}$", re.M)


def failure_excerpt(output: str, test_id: str) -> tuple[str, str] | None:
    """(the test's failing source line(s), the error lines) from pytest's --tb=short output."""
    path, names = locate_test(test_id)
    want = ".".join(names)
    sections = list(_SECTION.finditer(output))
    for i, m in enumerate(sections):
        if m.group(1).split("[", 1)[0] != want:
            continue
        body = output[m.end(): sections[i + 1].start() if i + 1 < len(sections) else len(output)]
        body = body.split("\n=====", 1)[0]
        code, errors, in_test = [], [], False
        for line in body.splitlines():
            if re.match(r"^\S.*:\d+: in ", line):
                in_test = line.startswith(path) and not code
            elif line.startswith("E "):
                text = line[2:].strip()
                if text and not text.startswith(("Use -v", "Full diff", "Omitting")):
                    errors.append(text)
            elif in_test and line.startswith("    ") and line.strip(" ^~"):
                code.append(line[4:])
        if errors:
            return "\n".join(code).strip(), "\n".join(errors[:10])
    return None


def problem_statement(pkg: Package, run: SuiteRun, f2p: list[str]) -> str:
    examples, used = [], set()
    for tid in f2p:
        fn = locate_test(tid)[1][-1]
        if fn in used:
            continue
        got = failure_excerpt(run.output, tid)
        if got:
            used.add(fn)
            examples.append((tid.split("::")[-1], *got))
        if len(examples) == 2:
            break
    n = len(f2p)
    parts = [f"Since a recent change, {pkg.name} {pkg.version} gives wrong results: "
             f"{n} check{'s' if n != 1 else ''} of its test suite now fail{'' if n != 1 else 's'}."]
    for i, (name, code, error) in enumerate(examples):
        where = f" (`{name}`)" if "[" in name else ""
        parts.append(("For example, this check fails" if i == 0 else "And this one") + where + ":"
                     + (f"\n\n```python\n{code}\n```" if code else "") + f"\n\nwith:\n\n```\n{error}\n```")
    parts.append("The checks show the expected behaviour. Find the bug in the library code and fix it.")
    return "\n\n".join(parts)


# ---------------------------------------------------------------- making the tasks


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


def build_task(pkg: Package, kept: Kept, instance_id: str, work: Path, bundle_repo: Path,
               timeout_s: float, min_p2p: int = 3) -> SweInstance | None:
    """One task: commit the base state, compute the patches and the FAIL/PASS lists, check it."""
    m = kept.mutation
    base = work / instance_id
    shutil.copytree(pkg.root, base)
    original = (pkg.root / m.file).read_text(encoding="utf-8")
    (base / m.file).write_text(m.apply(original), encoding="utf-8")
    hidden = hide_tests(pkg.root, kept.failing) or {}
    for rel, text in hidden.items():
        (base / rel).write_text(text, encoding="utf-8")
    message = f"{pkg.repo} {pkg.version}"
    commit = fresh_repository(base, message)
    for rel in hidden:
        shutil.copy(pkg.root / rel, base / rel)
    test_patch = git(base, "diff", "--binary").stdout
    git(base, "checkout", "-q", "--", ".")
    shutil.copy(pkg.root / m.file, base / m.file)
    gold = git(base, "diff", "--binary").stdout
    git(base, "checkout", "-q", "--", ".")
    git(bundle_repo, "fetch", "-q", str(base), f"HEAD:refs/heads/task/{instance_id}")

    draft = SweInstance(instance_id=instance_id, repo=pkg.repo, base_commit=commit, problem_statement="-",
                        patch=gold, test_patch=test_patch, FAIL_TO_PASS=[], PASS_TO_PASS=[], version=pkg.version,
                        test_cmd=TEST_CMD, test_env=pkg.test_env)
    before = _run_at(draft, str(base), "", timeout_s)
    after = _run_at(draft, str(base), gold, timeout_s)
    unclear = before.duplicates | after.duplicates
    f2p = sorted((before.failing & after.passing) - unclear)
    p2p = sorted((before.passing & after.passing) - unclear)
    if not f2p or len(p2p) < min_p2p or before.timed_out or after.timed_out:
        return None
    mutation = {"operator": m.operator, "file": m.file, "line": m.line, "function": m.function,
                "description": m.describe(original)}
    return SweInstance(
        instance_id=instance_id, repo=pkg.repo, base_commit=commit,
        problem_statement=problem_statement(pkg, before, f2p), hints_text="", created_at="",
        version=pkg.version, patch=gold, test_patch=test_patch, FAIL_TO_PASS=f2p, PASS_TO_PASS=p2p,
        environment_setup_commit=commit, source=f"{pkg.name}-{pkg.version}.bundle", test_cmd=TEST_CMD,
        test_env=pkg.test_env, test_timeout_s=120, log_parser="parse_log_pytest", eval_type="pass_and_fail",
        package=pkg.name, package_version=pkg.version, license=pkg.license, mutation=mutation)


def _run_at(inst: SweInstance, source: str, patch: str, timeout_s: float) -> SuiteRun:
    tmp = Path(tempfile.mkdtemp(prefix="make-swe-run-"))
    try:
        repo = tmp / "repo"
        clone_at(source, inst.base_commit, repo)
        if patch:
            (tmp / "p.diff").write_text(patch, encoding="utf-8")
            if not apply_patch(repo, tmp / "p.diff")[0]:
                raise RuntimeError(f"{inst.instance_id}: the gold patch does not apply")
        reset_test_files(repo, inst)
        (tmp / "t.diff").write_text(inst.test_patch, encoding="utf-8")
        git(repo, "apply", str(tmp / "t.diff"))
        return run_tests(repo, inst.directives, inst.test_env, timeout_s)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def make_swe(package: str, version: str | None = None, out_dir: Path | None = None, count: int = 12,
             seed: int = 0, sdist: Path | None = None, tests: list[str] | None = None, max_failing: int = 30,
             jobs: int = 2, license: str | None = None, rewrite: Callable[[str, SweInstance], str] | None = None,
             progress: Progress = lambda s: None) -> list[SweInstance]:
    """Make up to `count` tasks from a package (see the module docstring); returns the rows written."""
    from skillopt.benchmarks.swe_grading import grading

    if sdist is not None and not Path(sdist).is_file():
        raise BadInput(f"sdist {sdist} not found")
    grading()  # the swe extra (log parser and grading) is needed
    out_dir = Path(out_dir) if out_dir else SHIPPED_TASKS.parent
    tmp = Path(tempfile.mkdtemp(prefix="make-swe-"))
    try:
        if sdist is None:
            progress(f"downloading the sdist of {package}{'==' + version if version else ''}")
            sdist = fetch_sdist(package, version, tmp / "dl")
        root = unpack(Path(sdist), tmp / "src")
        pkg = inspect_package(root, package, tests, license)
        progress(f"{pkg.name} {pkg.version} ({pkg.license}, {pkg.repo}): tests {', '.join(pkg.test_paths)}; "
                 f"{len(pkg.source_files)} source files")
        baseline = run_tests(pkg.root, pkg.test_paths, pkg.test_env, 600)
        if baseline.timed_out or not baseline.passing:
            raise BadInput(f"{pkg.name}: its test suite does not pass here:\n{baseline.output[-1500:]}")
        timeout_s = 60.0
        candidates = [m for f in pkg.source_files
                      for m in find_mutations(f, (root / f).read_text(encoding="utf-8"))]
        candidates = interleave(candidates, seed)
        progress(f"baseline: {len(baseline.passing)} tests pass; {len(candidates)} candidate mutations")
        spare = max(2, count // 3)  # some kept mutations do not make a task (too few PASS_TO_PASS...)
        kept = screen(pkg, baseline, candidates, count + spare, max_failing, timeout_s, jobs, progress)
        bundle_repo = tmp / "bundle.git"
        bundle_repo.mkdir()
        git(bundle_repo, "init", "-q", "--bare")
        rows: list[SweInstance] = []
        for kept_one in kept:
            if len(rows) == count:
                break
            iid = f"{pkg.name}-{pkg.version}-{len(rows) + 1:03d}"
            inst = build_task(pkg, kept_one, iid, tmp / "tasks", bundle_repo, timeout_s)
            if inst is not None and rewrite is not None:
                inst = inst.model_copy(update={"problem_statement": rewrite(inst.problem_statement, inst)})
            if inst is None or not _check(inst, tmp / "tasks" / iid, progress):
                git(bundle_repo, "update-ref", "-d", f"refs/heads/task/{iid}")
                shutil.rmtree(tmp / "tasks" / iid)
                progress(f"  dropped {kept_one.mutation.describe((root / kept_one.mutation.file).read_text())}")
                continue
            rows.append(inst)
        if not rows:
            raise BadInput(f"{pkg.name}: no mutation made a usable task")
        out_dir.mkdir(parents=True, exist_ok=True)
        bundle = out_dir / f"{pkg.name}-{pkg.version}.bundle"
        git(bundle_repo, "gc", "-q", "--aggressive", "--prune=now")
        git(bundle_repo, "bundle", "create", "-q", str(bundle), "--branches")
        write_rows(out_dir / "tasks.jsonl", rows, pkg.name, pkg.version)
        progress(f"wrote {len(rows)} tasks to {out_dir / 'tasks.jsonl'} and {bundle}")
        return rows
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _check(inst: SweInstance, source: Path, progress: Progress) -> bool:
    """CI's check: the gold patch resolves the task, an empty patch does not."""
    gold = grade_local(inst, inst.patch, str(source))
    empty = grade_local(inst, "", str(source), run_empty=True)
    if gold.resolved and not empty.resolved:
        return True
    progress(f"  dropped {inst.instance_id}: gold resolved={gold.resolved}, empty resolved={empty.resolved}"
             f" {gold.error or ''}")
    return False


def write_rows(path: Path, rows: list[SweInstance], package: str, version: str) -> None:
    """Replace this package version's rows in a tasks file, keep the others; sorted by id."""
    keep: list[dict] = []
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                if not (row.get("package") == package and row.get("package_version") == version):
                    keep.append(row)
    new = [_hub_row(r) for r in rows]
    all_rows = sorted(keep + new, key=lambda r: r["instance_id"])
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in all_rows), encoding="utf-8")


def _hub_row(inst: SweInstance) -> dict:
    row = inst.row()
    row["FAIL_TO_PASS"] = json.dumps(row["FAIL_TO_PASS"])  # as on the hub: JSON strings
    row["PASS_TO_PASS"] = json.dumps(row["PASS_TO_PASS"])
    return row




REWRITE_TEMPLATE = "swe_issue.md.j2"  # prompts/: values `statement`, `package`, `version`


def model_rewriter(spec: str, env) -> Callable[[str, SweInstance], str]:
    """A `rewrite` for `make_swe` that asks a model (through `skillopt.models`) to turn a generated
    statement into an issue report; the prompt is the template `prompts/swe_issue.md.j2`."""
    import asyncio

    from skillopt.models.router import Models
    from skillopt.models.spec import parse_model_spec
    from skillopt.models.types import ChatRequest, Message
    from skillopt.prompts import PROMPTS_DIR, render

    if not (PROMPTS_DIR / REWRITE_TEMPLATE).is_file():
        raise BadInput(f"--rewrite-model needs the prompt template {PROMPTS_DIR / REWRITE_TEMPLATE}")
    model, models = parse_model_spec(spec), Models(env)

    def rewrite(statement: str, inst: SweInstance) -> str:
        package = (inst.model_extra or {}).get("package") or inst.repo
        prompt = render(REWRITE_TEMPLATE, statement=statement, package=package, version=inst.version)
        req = ChatRequest(messages=(Message(role="user", content=prompt),), max_tokens=1500)
        text = asyncio.run(models.chat(model, req, "optimizer")).text.strip()
        return text or statement

    return rewrite
