"""git, the one way skillopt uses it: harnesses (the workspace's base commit and the agent's patch)
and graders (SWE-bench repositories, applying a patch with SWE-bench's fallbacks) alike.

Every call runs with a fixed identity and dates and no user or system configuration, hooks,
filters or fsmonitor, so a result never depends on the machine. `wrap` runs git inside a sandbox
(a workspace the agent had: its repository configuration is the agent's).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

# Kept out of every diff: the harnesses' folders (skills, the agent's HOME) and caches.
EXCLUDES = (".claude/", ".agents/", ".home/", ".skillopt/", "__pycache__/", "*.pyc", ".pytest_cache/")
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"  # git's empty tree: base of a repo with no commit

# The fallbacks of swebench.harness.run_evaluation.GIT_APPLY_CMDS (5.0.2), in order; the tree is
# reset between attempts, and a patch that is already applied counts as applied.
APPLY_CMDS: tuple[tuple[str, ...], ...] = (
    ("git", "apply", "--verbose"),
    ("git", "apply", "--verbose", "--3way"),
    ("git", "apply", "--verbose", "--reject"),
    ("patch", "--batch", "--forward", "--fuzz=5", "-p1", "-i"),
)
RESET_CMDS: tuple[tuple[str, ...], ...] = (("git", "checkout", "--", "."), ("git", "clean", "-fdq"))

Wrap = Callable[[list[str]], list[str]]


def git(cwd: Path, *args: str, check: bool = True, timeout: float = 300, input: str | None = None,
        wrap: Wrap = list) -> subprocess.CompletedProcess:
    """git in `cwd` with a fixed identity and no user or system configuration."""
    env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(cwd), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C",
           "GIT_AUTHOR_NAME": "skillopt", "GIT_AUTHOR_EMAIL": "skillopt@localhost",
           "GIT_COMMITTER_NAME": "skillopt", "GIT_COMMITTER_EMAIL": "skillopt@localhost",
           "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000"}
    cmd = ["git", "-c", "commit.gpgsign=false", "-c", "core.hooksPath=" + os.devnull, "-c", "core.autocrlf=false",
           "-c", "core.fsmonitor=false", "-c", "advice.detachedHead=false", "-c", "init.defaultBranch=main", *args]
    res = subprocess.run(wrap(cmd), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, input=input)
    if check and res.returncode != 0:
        raise subprocess.CalledProcessError(res.returncode, cmd, res.stdout, res.stderr)
    return res


def write_excludes(repo: Path) -> None:
    """Add `EXCLUDES` to the repository's own exclude file (those it lacks; its other lines kept)."""
    exclude = repo / ".git" / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    have = exclude.read_text(encoding="utf-8") if exclude.exists() else ""
    extra = [p for p in EXCLUDES if p not in have.splitlines()]
    if extra:
        exclude.write_text(have + ("" if not have or have.endswith("\n") else "\n") + "\n".join(extra) + "\n",
                           encoding="utf-8")


def base_commit(repo: Path, message: str, force: bool = False) -> str:
    """Make `repo` a repository (unless it is one) whose files are committed; returns HEAD.
    `force`: commit even the files its .gitignore names."""
    if not (repo / ".git").exists():
        git(repo, "init", "-q")
    write_excludes(repo)
    git(repo, "add", "-A", *(["--force"] if force else []))
    if git(repo, "status", "--porcelain", check=False).stdout.strip() or \
            git(repo, "rev-parse", "--verify", "-q", "HEAD", check=False).returncode != 0:
        git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD").stdout.strip()


def diff(repo: Path, wrap: Wrap = list) -> str | None:
    """Everything changed since the base commit, new files included (excluded folders left out);
    None when `repo` is not a repository or git fails."""
    if not (Path(repo) / ".git").exists():
        return None
    try:
        git(repo, "add", "-A", wrap=wrap)
        head = git(repo, "rev-parse", "--verify", "-q", "HEAD", check=False, wrap=wrap).returncode == 0
        return git(repo, "diff", "--cached", "--binary", "--no-ext-diff", "--no-textconv",
                   "HEAD" if head else EMPTY_TREE, wrap=wrap).stdout
    except (OSError, subprocess.SubprocessError):
        return None


Runner = Callable[[list[str]], tuple[int, str]]  # argv -> (exit code, output)


def apply_with_fallbacks(patch_path: str, run: Runner) -> tuple[bool, str]:
    """Apply a patch file with SWE-bench's fallbacks, the tree reset between attempts; a patch
    already applied counts as applied. `run` runs one command where the repository is (here or in
    a container). Returns (applied, the last attempt's output)."""
    out = ""
    for i, cmd in enumerate(APPLY_CMDS):
        if i:
            reset(run)
        code, out = run([*cmd, patch_path])
        if code == 0:
            return True, out
    if run(["git", "apply", "--check", "--reverse", patch_path])[0] == 0:
        return True, "already applied"
    reset(run)
    return False, out


def reset(run: Runner) -> None:
    for cmd in RESET_CMDS:
        run(list(cmd))


def local_runner(repo: Path, timeout: float = 120) -> Runner:
    """Runs commands in `repo` on this machine (git through `git`, so with its fixed settings)."""

    def run(argv: list[str]) -> tuple[int, str]:
        try:
            if argv[0] == "git":
                res = git(repo, *argv[1:], check=False, timeout=timeout)
            else:
                res = subprocess.run(argv, cwd=repo, capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.SubprocessError) as e:
            return 1, f"{' '.join(argv)}: {e}"
        return res.returncode, (res.stdout + res.stderr).strip()

    return run
