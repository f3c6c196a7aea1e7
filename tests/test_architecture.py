"""docs/architecture.md's floors hold over the real import graph.

The floor list is read from the page (the table between its `floors:begin` / `floors:end` markers),
so the page and the code cannot drift apart. Every `import` of a skillopt module counts, at module
level or inside a function (a lazy import), `TYPE_CHECKING` ones too. The unit of a floor is a
package under skillopt/ (`store`), a top-level module (`config`), or `skillopt` (the package root).
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "skillopt"
DOC = REPO / "docs" / "architecture.md"


def floors() -> list[list[str]]:
    """The floors bottom to top, each the units it holds, as the page's floor table lists them."""
    text = DOC.read_text(encoding="utf-8")
    block = re.search(r"<!-- floors:begin -->(.*?)<!-- floors:end -->", text, re.S)
    assert block, "docs/architecture.md has no floor table (<!-- floors:begin --> ... <!-- floors:end -->)"
    rows = []
    for line in block.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].isdigit():
            rows.append((int(cells[0]), re.findall(r"`([\w.]+?)/?`", cells[1])))
    assert [n for n, _ in rows] == list(range(len(rows))), "floors are numbered 0, 1, 2, ... bottom to top"
    return [units for _, units in rows]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unit_of(module: str) -> str:
    """`skillopt.store.run_store` -> `store`; `skillopt.config` -> `config`; `skillopt` -> `skillopt`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "skillopt"


def is_module(name: str) -> bool:
    rel = Path(*name.split("."))
    return (REPO / rel).with_suffix(".py").is_file() or (REPO / rel / "__init__.py").is_file()


def imports(path: Path) -> list[tuple[str, int]]:
    """Every skillopt module `path` imports (at any depth), with its line."""
    me = module_name(path)
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names if a.name.split(".")[0] == "skillopt"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the importing module's package
                base = me.split(".") if path.name == "__init__.py" else me.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "skillopt":
                continue
            for a in node.names:  # `from skillopt import api` imports the module skillopt.api
                sub = f"{target}.{a.name}"
                found.append((sub if is_module(sub) else target, node.lineno))
    return found


def graph() -> list[tuple[str, int, str]]:
    """(importing module, line, imported module) for every import between skillopt modules."""
    return [(module_name(p), line, target) for p in sorted(PACKAGE.rglob("*.py")) for target, line in imports(p)]


def test_the_floor_table_names_every_package_and_module_once():
    listed = [u for floor in floors() for u in floor]
    assert len(listed) == len(set(listed)), f"named twice: {sorted(u for u in listed if listed.count(u) > 1)}"
    units = {unit_of(module_name(p)) for p in PACKAGE.rglob("*.py")}
    assert not units - set(listed), f"not on any floor of docs/architecture.md: {sorted(units - set(listed))}"
    assert not set(listed) - units, f"on a floor but not in skillopt/: {sorted(set(listed) - units)}"


def test_no_import_runs_upward():
    level = {u: n for n, floor in enumerate(floors()) for u in floor}
    upward = [f"{src}:{line} imports {dst} (floor {level[unit_of(dst)]} above {level[unit_of(src)]})"
              for src, line, dst in graph() if level[unit_of(dst)] > level[unit_of(src)]]
    assert not upward, "\n".join(upward)


def test_no_import_cycle_between_packages():
    edges: dict[str, set[str]] = defaultdict(set)
    for src, _, dst in graph():
        if unit_of(src) != unit_of(dst):
            edges[unit_of(src)].add(unit_of(dst))
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(u: str, path: list[str]) -> None:
        state[u] = 1
        for v in sorted(edges[u]):
            if state.get(v) == 1:  # v is on the path to u: a cycle
                here = path + [u]
                pytest.fail("import cycle between packages: " + " -> ".join(here[here.index(v):] + [v]))
            if v not in state:
                visit(v, path + [u])
        state[u] = 2

    for u in sorted(edges):
        if u not in state:
            visit(u, [])


def test_the_library_never_imports_the_cli():
    wrong = [f"{src}:{line} imports {dst}" for src, line, dst in graph()
             if unit_of(dst) == "cli" and unit_of(src) not in ("cli", "__main__")]
    assert not wrong, "\n".join(wrong)


def test_the_lowest_floor_imports_only_errors():
    wrong = [f"{src}:{line} imports {dst}" for src, line, dst in graph()
             if unit_of(src) == "io" and unit_of(dst) not in ("io", "errors")]
    assert not wrong, "\n".join(wrong)


def test_the_engine_knows_protocols_not_concrete_harnesses_or_benchmarks():
    seams = {"skillopt.harness.base", "skillopt.harness.registry", "skillopt.harness.workspace",
             "skillopt.harness.process", "skillopt.benchmarks", "skillopt.benchmarks.base",
             "skillopt.benchmarks.registry", "skillopt.benchmarks.custom"}
    wrong = [f"{src}:{line} imports {dst}" for src, line, dst in graph()
             if unit_of(src) == "engine" and unit_of(dst) in ("harness", "benchmarks") and dst not in seams]
    assert not wrong, "\n".join(wrong)


def test_the_report_runs_nothing():
    wrong = [f"{src}:{line} imports {dst}" for src, line, dst in graph() if unit_of(src) == "report" and (
        unit_of(dst) in ("models", "harness", "sandbox")
        or (unit_of(dst) == "engine" and dst not in ("skillopt.engine.events", "skillopt.engine.settings")))]
    assert not wrong, "\n".join(wrong)


def test_the_run_record_and_the_optimizer_never_import_each_other():
    wrong = [f"{src}:{line} imports {dst}" for src, line, dst in graph()
             if {unit_of(src), unit_of(dst)} == {"store", "optimizer"}]
    assert not wrong, "\n".join(wrong)


def test_only_the_index_listener_writes_the_index():
    """Training and evaluation runs feed runs/skillopt.db through one listener (engine/listeners.py)."""
    wrong = [f"{src}:{line} imports {dst}" for src, line, dst in graph()
             if dst == "skillopt.store.index" and unit_of(src) not in ("store", "report")
             and src != "skillopt.engine.listeners"]
    assert not wrong, "\n".join(wrong)
