"""Writing make-swe's tasks: one SWE-bench row per kept mutation (`build_task`: base commit, gold
patch, test patch, FAIL_TO_PASS / PASS_TO_PASS, the problem statement, optionally rewritten by a
model), CI's check of each, and the rows replacing that package version's in `tasks.jsonl`.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from skillopt.benchmarks.make_swe.package import TEST_CMD, Package, Progress, SuiteRun, run_tests
from skillopt.benchmarks.make_swe.selection import Kept, hide_tests, locate_test
from skillopt.benchmarks.swe_grading import SweInstance
from skillopt.benchmarks.swe_local import apply_patch, clone_at, fresh_repository, grade_local, reset_test_files
from skillopt.errors import BadInput
from skillopt.git import git


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


# ---------------------------------------------------------------- the tasks


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


def check_task(inst: SweInstance, source: Path, progress: Progress) -> bool:
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
