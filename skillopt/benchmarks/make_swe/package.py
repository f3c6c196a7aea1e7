"""The package make-swe works on: its sdist fetched and unpacked, its licence, source files and
test layout (`inspect_package`), and its test suite run with pytest (`run_tests`).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from email.parser import HeaderParser
from pathlib import Path

from skillopt.benchmarks.limits import ResourceLimits, minimal_env, run_limited
from skillopt.errors import BadInput

REDISTRIBUTABLE = ("MIT", "BSD", "Apache", "ISC", "PSF", "Python Software Foundation", "Unlicense", "0BSD", "Zlib")
TEST_CMD = ["python", "-m", "pytest", "-rA", "-p", "no:cacheprovider", "--tb=short"]
SKIP_DIRS = {"docs", "doc", "examples", "example", "benchmarks", "bench", ".git", "build", "dist"}
Progress = Callable[[str], None]


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
