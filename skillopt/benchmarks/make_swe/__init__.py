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

Modules: `mutate` (the mutations), `package` (fetch, inspect, run the tests), `selection` (screen
the mutations, hide the failing tests), `write` (build, check and write the tasks); `make_swe` below
ties them together.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from skillopt.benchmarks.make_swe.mutate import find_mutations, interleave
from skillopt.benchmarks.make_swe.package import Progress, fetch_sdist, inspect_package, run_tests, unpack
from skillopt.benchmarks.make_swe.selection import screen
from skillopt.benchmarks.make_swe.write import check_task, build_task, model_rewriter, write_rows
from skillopt.benchmarks.swe_grading import SweInstance
from skillopt.benchmarks.swe_local import SHIPPED_TASKS
from skillopt.errors import BadInput
from skillopt.git import git

__all__ = ["make_swe", "model_rewriter"]


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
            if inst is None or not check_task(inst, tmp / "tasks" / iid, progress):
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
