"""The mutations make-swe plants in a package: small AST edits inside functions (flip a comparison,
`and`/`or`, off-by-one constants, `+ 1`/`- 1`, negate or drop a branch, drop a guard, `True`/`False`
returns, `min`/`max`, drop a `not`), each a minimal text edit, and the seeded order they are tried in.
"""

from __future__ import annotations

import ast
import random
import re
from dataclasses import dataclass


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
