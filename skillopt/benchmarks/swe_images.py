"""SWE-bench instance images built on this machine, with no registry: `skillopt benchmarks build-images`.

- The **base image** (`<prefix>/swe-base:<suite>-<hash>`, also tagged `<prefix>/swe-base:<suite>`) is
  a Debian root file system made by `debootstrap --variant=minbase` from the mirror apt already uses,
  with Python, pytest, git and patch, imported with `docker import`. Or any image given as `base`
  that has those.
- An **instance image** is laid out like SWE-bench's official ones and named like them under a local
  prefix (`<prefix>/sweb.eval.x86_64.<instance_id>:latest`): the repository at `/testbed` at the
  base commit (a fresh one-commit repository, as `swe-local` makes it: no history, no hidden tests,
  no gold patch), its package importable (a `.pth` file, as `pip install -e` would do). The row that
  goes with it (`swebench_row`) carries `image`, an `eval_script` of SWE-bench's shape (check out
  the test files, apply the test patch, run the tests between the markers, reset the test files),
  `log_parser` and `eval_type`, so the `swebench` benchmark grades it like any SWE-bench 5.x row.

Images are cached by a hash of what they are built from (a label `skillopt.content` and, for the
base, its tag): building again rebuilds nothing that exists. Intermediate build containers are
removed whether the build works or not.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skillopt.benchmarks.docker_engine import LABEL, WORKDIR
from skillopt.benchmarks.swe_docker_grading import image_name
from skillopt.benchmarks.swe_grading import (
    END_TEST_OUTPUT,
    START_TEST_OUTPUT,
    SweInstance,
    patch_files,
)
from skillopt.errors import BadInput

BUILDER_VERSION = 1  # bump when what an image holds changes
DEFAULT_PREFIX = "local"
SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python-is-python3", "python3-pytest", "git", "patch", "ripgrep", "procps",
                 "ca-certificates")
HEREDOC = "EOF_114329324912"  # SWE-bench's delimiter
DEFAULT_MIRROR = "http://deb.debian.org/debian"
PRUNE = ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man", "usr/share/locale")
Progress = Callable[[str], None]


@dataclass(frozen=True)
class BuiltImage:
    instance_id: str
    image: str
    built: bool  # False: it was already there (same content)
    seconds: float


# ---------------------------------------------------------------- rows


def eval_script_for(inst: SweInstance) -> str:
    """An eval script in SWE-bench's shape for a `swe-local` row (its `test_cmd`, `test_env`)."""
    tests = patch_files(inst.test_patch)
    cmd = list(inst.test_cmd or ("python", "-m", "pytest", "-rA", "-p", "no:cacheprovider"))
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(inst.test_env.items()))
    run = " ".join(x for x in (env, shlex.join(cmd + inst.directives)) if x)
    reset = f"git checkout {inst.base_commit} {' '.join(shlex.quote(t) for t in tests)}"
    return "\n".join([
        "#!/bin/bash", "set -uxo pipefail", f"cd {WORKDIR}", reset,
        f"git apply -v - <<'{HEREDOC}'", inst.test_patch.rstrip("\n"), HEREDOC,
        f": '{START_TEST_OUTPUT}'", run, f": '{END_TEST_OUTPUT}'", reset]) + "\n"


def swebench_row(inst: SweInstance, prefix: str = DEFAULT_PREFIX) -> SweInstance:
    """A `swe-local` row as a SWE-bench 5.x row for the image built from it."""
    return inst.model_copy(update={"image": image_name(inst.model_copy(update={"image": None}), prefix),
                                   "eval_script": eval_script_for(inst),
                                   "log_parser": inst.log_parser or "parse_log_pytest",
                                   "eval_type": inst.eval_type or "pass_and_fail"})


# ---------------------------------------------------------------- the base image


def apt_mirror() -> str:
    """The Debian mirror apt uses here (deb822 or one-line sources), else deb.debian.org."""
    for path in (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")):
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            continue
        for url in re.findall(r"^(?:URIs:|deb)\s+(?:\[[^\]]*\]\s+)?(\S+)", text, re.M):
            if "security" not in url and url.startswith(("http://", "https://")):
                return url
    return DEFAULT_MIRROR


def _content(*parts: Any) -> str:
    return hashlib.sha256(json.dumps([BUILDER_VERSION, *parts], default=str).encode()).hexdigest()[:16]


def _has(client: Any, image: str, content: str | None = None) -> bool:
    try:
        img = client.images.get(image)
    except Exception:
        return False
    return content is None or (img.labels or {}).get(f"{LABEL}.content") == content


def base_image(client: Any, prefix: str = DEFAULT_PREFIX, mirror: str | None = None, suite: str = SUITE,
               packages: Sequence[str] = BASE_PACKAGES, progress: Progress = lambda _: None) -> str:
    """The base image, built once per content (see the module docstring); returns its name."""
    mirror = mirror or apt_mirror()
    content = _content(suite, mirror, sorted(packages))
    name = f"{prefix}/swe-base:{suite}-{content}"
    if _has(client, name):
        return name
    if shutil.which("debootstrap") is None or (hasattr(os, "geteuid") and os.geteuid() != 0):
        raise BadInput("building the base image needs debootstrap, run as root (apt-get install debootstrap), "
                       "or pass --base IMAGE (any image with python3, pytest, git and patch)")
    progress(f"base image {name}: debootstrap {suite} from {mirror} (about a minute)")
    root = Path(tempfile.mkdtemp(prefix="skillopt-rootfs-", dir="/var/tmp"))
    try:
        res = subprocess.run(["debootstrap", "--variant=minbase", f"--include={','.join(packages)}", suite,
                              str(root), mirror], capture_output=True, text=True, timeout=1800)
        if res.returncode != 0:
            tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or ["no output"]
            raise BadInput(f"debootstrap of {suite} from {mirror} failed: {tail[0][:300]}")
        for rel in PRUNE:
            for p in (root / rel).glob("*"):
                shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        stream = tar.stdout  # a pipe: stdout=PIPE
        assert stream is not None
        try:
            client.api.import_image_from_stream(stream, repository=f"{prefix}/swe-base", tag=f"{suite}-{content}",
                                                changes=["ENV LANG=C.UTF-8", f"WORKDIR {WORKDIR}"])
        finally:
            stream.close()
            tar.wait()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    client.images.get(name).tag(f"{prefix}/swe-base", suite)
    return name


# ---------------------------------------------------------------- instance images


def _context(inst: SweInstance, source: str, base: str, content: str) -> bytes:
    """The build context: a Dockerfile and `testbed/` (the base commit as a one-commit repository)."""
    from skillopt.benchmarks.swe_local import SetupError, materialize

    tmp = Path(tempfile.mkdtemp(prefix="skillopt-image-"))
    try:
        testbed = tmp / "testbed"
        testbed.mkdir()
        try:
            head = materialize(inst, source, testbed)
        except SetupError as e:
            raise BadInput(f"{inst.instance_id}: {e}") from None
        if head != inst.base_commit:
            raise BadInput(f"{inst.instance_id}: the repository made from {source} is at {head[:12]}, "
                           f"not at the row's base commit {inst.base_commit[:12]}")
        paths = [p for p in (inst.test_env.get("PYTHONPATH") or ".").split(os.pathsep) if p and not os.path.isabs(p)]
        pth = "\\n".join(os.path.normpath(f"{WORKDIR}/{p}") for p in paths)
        dockerfile = "\n".join([
            f"FROM {base}", f"COPY testbed {WORKDIR}",
            f"RUN printf '{pth}\\n' > /usr/lib/python3/dist-packages/skillopt-testbed.pth",
            f"WORKDIR {WORKDIR}",
            f"LABEL {LABEL}.content={content} {LABEL}.instance={inst.instance_id}"]) + "\n"
        (tmp / "Dockerfile").write_text(dockerfile, encoding="utf-8")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(tmp / "Dockerfile", "Dockerfile")
            tar.add(testbed, "testbed")
        return buf.getvalue()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def build_instance(client: Any, inst: SweInstance, source: str, base: str, prefix: str = DEFAULT_PREFIX,
                   rebuild: bool = False) -> BuiltImage:
    """The instance's image, unless one of the same content is there already."""
    t0 = time.monotonic()
    name = swebench_row(inst, prefix).image or ""
    content = _content(base, inst.base_commit, inst.test_env.get("PYTHONPATH", "."))
    if not rebuild and _has(client, name, content):
        return BuiltImage(inst.instance_id, name, False, round(time.monotonic() - t0, 2))
    context = _context(inst, source, base, content)
    try:
        client.images.build(fileobj=io.BytesIO(context), custom_context=True, tag=name, rm=True, forcerm=True,
                            pull=False)
    except Exception as e:
        why = (str(e).strip().splitlines() or [type(e).__name__])[-1][:300]
        raise BadInput(f"the image of {inst.instance_id} cannot be built: {why}") from None
    return BuiltImage(inst.instance_id, name, True, round(time.monotonic() - t0, 2))


def build_images(instances: Sequence[SweInstance], base_dir: Path | None, prefix: str = DEFAULT_PREFIX,
                 base: str | None = None, mirror: str | None = None, rebuild: bool = False,
                 progress: Progress = lambda _: None, client: Any = None) -> list[BuiltImage]:
    """Base image (unless `base` names one) and one image per `swe-local` row; cached by content."""
    from skillopt.benchmarks.docker_engine import docker_client
    from skillopt.benchmarks.swe_local import RepoCache, resolve_source

    client = client or docker_client(what="building SWE images")
    if not re.fullmatch(r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*", prefix):
        raise BadInput(f"image prefix {prefix!r} is not a valid image name part (lower-case letters, digits, ._-/)")
    if base is None:
        base = base_image(client, prefix, mirror, progress=progress)
    elif not _has(client, base):
        raise BadInput(f"base image {base} is not here: pull or build it first")
    repos = RepoCache()
    out = []
    for inst in instances:
        source = repos.local(resolve_source(inst, base_dir), inst.base_commit)
        built = build_instance(client, inst, source, base, prefix, rebuild)
        progress(f"{built.image}: {'built' if built.built else 'up to date'} ({built.seconds:.1f}s)")
        out.append(built)
    return out
