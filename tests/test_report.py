"""`skillopt report`: a self-contained HTML page rendered by headless Chromium, and Markdown.

Chromium comes from the Debian package (`apt-get update && apt-get install -y chromium`); the
Chromium tests are skipped, saying so, where it is missing. The page holds no script, so what it
shows is in the DOM: the tests read the DOM Chromium built, its console (any message fails), and
take a screenshot.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

import skillopt.cli.commands  # noqa: F401  (registers the command groups)
import skillopt.cli.report  # noqa: F401
import skillopt.cli.runs  # noqa: F401
from skillopt.cli.app import app
from tests.test_compare import A_HARD, A_SOFT, SEED, build_run, copy_runs

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
                  "--hide-scrollbars", "--enable-logging=stderr", "--v=0"]


def cli(*args: str, runs_dir: Path):
    return CliRunner().invoke(app, ["--runs-dir", str(runs_dir), *args], env={"COLUMNS": "200"})


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if path := shutil.which(name):
            return path
    pytest.skip("Chromium is not installed (apt-get update && apt-get install -y chromium)")


def open_in_chromium(page: Path, tmp_path: Path, *mode: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"chromium-profile-{len(list(tmp_path.glob('chromium-profile-*')))}"
    return subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *mode, page.resolve().as_uri()],
                          capture_output=True, text=True, timeout=90, cwd=tmp_path)


def console_messages(stderr: str) -> list[str]:
    """What the page wrote to the console (errors, CSP violations, failed loads)."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


class Dom(HTMLParser):
    """Tags with their attributes, and the text of the page."""

    def __init__(self, html: str):
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, {k: v or "" for k, v in attrs}))

    def handle_data(self, data):
        self.text.append(data)

    def find(self, tag: str, **attrs: str) -> list[dict[str, str]]:
        return [a for t, a in self.tags if t == tag and all(
            (v in a.get(k.rstrip("_"), "").split()) if k.endswith("_") else a.get(k) == v for k, v in attrs.items())]


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_console_check_catches_a_broken_page(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text('<p>x</p><img src="https://example.com/a.png"><script>undefinedFunction()</script>')
    r = open_in_chromium(bad, tmp_path, "--dump-dom")
    assert r.returncode == 0 and any("undefinedFunction" in m for m in console_messages(r.stderr)), r.stderr


def test_html_report_of_a_real_run_renders_in_chromium(tmp_path_factory, tmp_path):
    runs = copy_runs(tmp_path_factory, tmp_path)
    page = tmp_path / "report.html"
    r = cli("report", "codes", "-o", str(page), runs_dir=runs)
    assert r.exit_code == 0, r.stderr
    html = page.read_text()
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", html), "the page must not load anything"
    assert "<script" not in html
    shot = tmp_path / "report.png"
    r = open_in_chromium(page, tmp_path, f"--screenshot={shot}", "--window-size=1280,2600")
    assert r.returncode == 0 and shot.exists(), r.stderr
    assert png_size(shot) == (1280, 2600) and shot.stat().st_size > 30_000
    r = open_in_chromium(page, tmp_path, "--dump-dom")
    assert r.returncode == 0, r.stderr
    assert console_messages(r.stderr) == []
    dom = Dom(r.stdout)
    # validation chart: the incumbent line, the accepted and rejected candidates of this run
    assert dom.find("svg", id="validation-chart") and dom.find("polyline", class_="series")
    accepted, rejected = dom.find("circle", class_="accepted"), dom.find("circle", class_="rejected")
    assert len(accepted) == 1 and len(rejected) == 0  # step 2 accepted the rule; step 1's edit failed its screen
    assert len(dom.find("polygon", class_="candidate")) == 2  # the two consolidations, both rejected
    # heatmaps: 8 val tasks; the seed, the accepted candidate, the consolidations (every pair evaluated)
    assert dom.find("svg", id="heatmap-val") and dom.find("svg", id="heatmap-test")
    val_cells = len(dom.find("rect", class_="cell")) - len(dom.find("rect", class_="missing"))
    assert val_cells > 0
    assert dom.find("svg", id="tokens-chart")
    text = " ".join(" ".join(dom.text).split())
    for needed in ("Final scores", "baseline (seed)", "0.000 [0.000, 0.324]", "1.000 [0.510, 1.000]",
                   "Validation score per step", "Tokens and cost by role", "optimizer", "target",
                   "+Secret codes are ZETA- followed by the item number.", "What the optimizer tried",
                   "Be concise and polite.", "screened-out", "candidate 0 vs incumbent 0 on 4 tasks",
                   "8 wins, 0 losses, 0 ties over 8 of 8 pairs", "p = 0.0039"):
        assert needed in text, needed
    final_rows = r.stdout.split('id="final-table"')[1].split("</table>")[0].count("<tr>")
    assert final_rows == 3  # header + baseline, best


def test_markdown_report_and_defaults(tmp_path_factory, tmp_path):
    runs = copy_runs(tmp_path_factory, tmp_path)
    r = cli("report", "codes", "--format", "markdown", "-o", "-", runs_dir=runs)
    assert r.exit_code == 0, r.stderr
    md = r.stdout
    assert md.startswith("## skillopt report: `codes` (finished)")
    # it opens with the settings that matter and the wall time, then the sealed-test paired lift
    head = md.split("### Final scores")[0]
    for needed in ("| benchmark | ", "| target model | openai-compatible:fake-target@", "| optimizer model | ",
                   "| tasks per split | train 4, val 8, test 4 (split seed 0) |", "| gate | hard score, alpha 0.05",
                   "| wall time | "):
        assert needed in head, needed
    summary = json.loads((runs / "codes" / "summary.json").read_text())
    lift = (f"**+1.000 (95% CI {summary['test_delta']['lo']:+.3f} to +1.000, paired agresti-min, n=4; 4 won, 0 lost, "
            f"0 tied): better**")
    assert lift in head and head.index("### Sealed test") > head.index("| wall time |")
    assert "| baseline (seed) | v000 | 0.000 [0.000, 0.324] | 8 | 0 | 0.000 [0.000, 0.490] | 4 | 0 |" in md
    assert "**s001-c1** (reflection, v001): **screened-out**. not kept: no better than the incumbent" in md
    assert "Be concise and polite." in md and "#### Step 2 (epoch 2)" in md
    assert "- gate: accept-final: 8 W / 0 L / 0 T over 8 of 8 pairs, p = 0.0039" in md
    assert "| 2 | 2 | 1 | 1 | 1 | v003 | 1.000 | accept | 1.000 |" in md
    assert "```diff\n--- v000 (seed)\n+++ v003 (best)" in md and "+Secret codes are ZETA-" in md
    r = cli("report", "codes", runs_dir=runs)
    assert r.exit_code == 0 and (runs / "codes" / "report.html").exists()
    r = cli("report", "codes", "-o", str(tmp_path / "r.md"), runs_dir=runs)
    assert r.exit_code == 0 and (tmp_path / "r.md").read_text().startswith("## skillopt report")
    # markdown without -o goes to stdout, not into the run folder
    r = cli("report", "codes", "--format", "markdown", runs_dir=runs)
    assert r.exit_code == 0 and r.stdout.startswith("## skillopt report") and not (runs / "codes" / "report.md").exists()


def test_report_of_a_run_in_progress_and_bad_input(tmp_path):
    runs = tmp_path / "runs"
    build_run(runs, "live", [SEED], {(0, "val"): list(zip(A_HARD, A_SOFT))}, status="running")
    r = cli("report", "live", "-o", str(tmp_path / "live.html"), runs_dir=runs)
    assert r.exit_code == 0, r.stderr
    assert "is running" in r.stderr
    html = (tmp_path / "live.html").read_text()
    assert "the run is running: this report shows what it has so far" in html and "no steps yet" in html
    r = cli("report", "nope", runs_dir=runs)
    assert r.exit_code == 2 and "no run 'nope'" in r.stderr
    r = cli("report", "live", "--format", "pdf", runs_dir=runs)
    assert r.exit_code == 2 and "unknown report format 'pdf'" in r.stderr


def test_runs_show_prints_the_version_tree_with_gate_evidence(tmp_path_factory, tmp_path):
    runs = copy_runs(tmp_path_factory, tmp_path)
    r = cli("runs", "show", "codes", runs_dir=runs)
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    root = next(i for i, line in enumerate(lines) if line.startswith("v000 [seed] seed: val 0.000 (n=8), test 0.000 (n=4)"))
    tree = "\n".join(lines[root:])
    assert "├── v001 [screened-out] step 1: reflection; screen on train: 0 vs 0 on 4 tasks" in tree
    assert "gate rejected: difference +0.000, one-sided 95% lower bound" in tree  # a consolidation: non-inferiority
    accepted = next(line for line in lines if "[accepted] step 2" in line)
    assert accepted.startswith("└── v") and accepted.endswith("<best>") and "test 1.000 (n=4)" in accepted
    assert "8 wins, 0 losses, 0 ties; evaluated 8/8" in tree and "edit add at 'Answer format' (applied)" in tree
    child = next(line for line in lines if "consolidate epoch 2" in line)
    assert child.startswith("    └── v")  # the consolidation of the accepted version hangs under it
    nodes = json.loads(cli("runs", "show", "codes", "--json", runs_dir=runs).stdout)["nodes"]
    best = next(n for n in nodes if "best" in n["marks"])
    assert best["parent"] == 0 and best["gate"]["accepted"] and best["edits"][0]["op"] == "add"
    r = cli("runs", "show", f"codes:v{best['version']}", "--diff", runs_dir=runs)
    assert r.exit_code == 0 and "+Secret codes are ZETA- followed by the item number." in r.stdout
    assert "gate evidence (hard, per task, mean over trials)" in r.stdout and r.stdout.count(" win ") == 8
    r = cli("runs", "show", "codes:best", runs_dir=runs)
    assert r.exit_code == 0 and "name: task-solver" in r.stdout
    r = cli("runs", "show", "codes:v42", runs_dir=runs)
    assert r.exit_code == 2 and "has no version v042" in r.stderr


# tracking ------------------------------------------------------------------------------------------------
class FakeMlflow:
    """The slice of the mlflow module the tracker uses, recording every call."""

    def __init__(self, fail_on: str | None = None):
        self.calls: list[tuple[str, tuple, dict]] = []
        self.runs: dict[str, dict] = {}  # mlflow run id -> {"tags", "params", "metrics", "artifacts", "status"}
        self.active: str | None = None
        self.experiments: set[str] = set()
        self.fail_on = fail_on

    def _record(self, name, *args, **kwargs):
        self.calls.append((name, args, kwargs))
        if name == self.fail_on:
            raise ConnectionError("tracking server unreachable")

    def set_tracking_uri(self, uri):
        self._record("set_tracking_uri", uri)

    def get_experiment_by_name(self, name):
        self._record("get_experiment_by_name", name)
        return name if name in self.experiments else None

    def create_experiment(self, name, artifact_location=None):
        self._record("create_experiment", name, artifact_location=artifact_location)
        self.experiments.add(name)

    def set_experiment(self, name):
        self._record("set_experiment", name)
        self.experiments.add(name)

    def start_run(self, run_id=None, run_name=None, tags=None):
        self._record("start_run", run_id=run_id, run_name=run_name, tags=tags)
        if run_id is None:
            run_id = f"mlrun-{len(self.runs)}"
            self.runs[run_id] = {"tags": dict(tags or {}), "params": {}, "metrics": [], "artifacts": {}, "status": "RUNNING"}
        self.active = run_id

    def search_runs(self, experiment_names, filter_string, output_format):
        self._record("search_runs", experiment_names, filter_string)
        from types import SimpleNamespace

        want = filter_string.split("= '")[1].rstrip("'")
        return [SimpleNamespace(info=SimpleNamespace(run_id=k)) for k, r in self.runs.items()
                if r["tags"].get("skillopt.run_id") == want]

    def log_params(self, params):
        self._record("log_params", params)
        self.runs[self.active]["params"].update(params)

    def log_metrics(self, metrics, step=None):
        self._record("log_metrics", metrics, step=step)
        self.runs[self.active]["metrics"].append((step, dict(metrics)))

    def log_text(self, text, artifact_file):
        self._record("log_text", artifact_file)
        self.runs[self.active]["artifacts"][artifact_file] = text

    def set_tag(self, key, value):
        self._record("set_tag", key, value)
        self.runs[self.active]["tags"][key] = value

    def end_run(self, status="FINISHED"):
        self._record("end_run", status=status)
        self.runs[self.active]["status"] = status
        self.active = None


def train_in_process(tmp_path: Path, listeners: list, url: str, resume: str | None = None, **overrides):
    """`skillopt run`'s library call against the scripted fake server at `url`, with these listeners."""
    from skillopt.config import deep_merge, resolve_config
    from skillopt.engine.training import train
    from skillopt.models.types import ProviderEnv
    from skillopt.store.run_store import RunStore
    from tests.helpers import write_jsonl
    from tests.test_train_e2e import code_tasks

    data = tmp_path / "codes.jsonl"
    if not data.exists():
        write_jsonl(data, code_tasks(16))
    layer = {"benchmark": str(data), "harness": "chat", "target_model": f"openai-compatible:fake-target@{url}",
             "optimizer_model": f"openai-compatible:fake-opt@{url}", "run_id": "codes",
             "splits": {"train": 4, "val": 8, "test": 4}, "models": {"retry_base_delay_s": 0.01},
             "train": {"epochs": 2, "batch_size": 4, "concurrency": 2, "check_protected": False}}
    if resume:  # like the CLI: a resumed run starts from its own config
        layer = RunStore.open(tmp_path / "runs", resume).read_config().layer()
    cfg = resolve_config(deep_merge(layer, overrides))
    return train(cfg, tmp_path / "runs", ProviderEnv.from_environ({}), listeners, resume=resume)


@pytest.fixture
def fake_url():
    from tests.fakes.server import FakeModelServer
    from tests.test_train_e2e import Scripted

    with FakeModelServer(Scripted()) as srv:
        yield srv.openai_url


def test_mlflow_tracker_logs_params_steps_versions_and_summary(tmp_path, fake_url):
    from skillopt.report.tracking import MlflowTracker

    fake = FakeMlflow()
    summary = train_in_process(tmp_path, [MlflowTracker(tmp_path / "runs", local_root=tmp_path, mlflow=fake)], fake_url)
    assert summary.status == "finished"
    (run,) = fake.runs.values()
    assert run["tags"]["skillopt.run_id"] == "codes" and run["status"] == "FINISHED"
    assert run["params"]["train.epochs"] == "2" and run["params"]["harness"] == "chat"
    uri = next(c[1][0] for c in fake.calls if c[0] == "set_tracking_uri")
    assert uri == f"sqlite:///{(tmp_path / 'mlruns' / 'mlflow.db').resolve()}"
    steps = {s: m for s, m in run["metrics"] if s is not None and "val" in m}
    assert steps[1]["val"] == 0.0 and "accepted" not in steps[1]  # step 1's candidate failed its screen: no decision
    assert steps[2]["val"] == 1.0 and steps[2]["accepted"] == 1.0 and steps[2]["tokens"] > 0
    versions = sorted(p.name for p in (tmp_path / "runs" / "codes" / "skills").glob("v*.md"))
    assert sorted(k.split("/")[1] for k in run["artifacts"] if k.startswith("skills/")) == versions
    gated = {f"gates/{v[:-3]}.json" for v in versions[1:]} - {"gates/v001.json"}  # v001: screened out
    assert {k for k in run["artifacts"] if k.startswith("gates/")} == gated
    assert "Secret codes are ZETA-" in run["artifacts"]["best_skill.md"] and "summary.json" in run["artifacts"]
    final = run["metrics"][-1][1]
    assert final["seed_val_hard"] == 0.0 and final["best_test_hard"] == 1.0


def test_mlflow_tracker_continues_the_same_run_on_resume(tmp_path, fake_url):
    from skillopt.report.tracking import MlflowTracker

    fake = FakeMlflow()
    first = train_in_process(tmp_path, [MlflowTracker(tmp_path / "runs", mlflow=fake, local_root=tmp_path)], fake_url,
                             budget={"max_rollouts": 6})
    assert first.status == "stopped" and next(iter(fake.runs.values()))["status"] == "KILLED"
    second = train_in_process(tmp_path, [MlflowTracker(tmp_path / "runs", mlflow=fake, local_root=tmp_path)], fake_url,
                              resume="codes", budget={"max_rollouts": 1000})
    assert second.status == "finished"
    assert len(fake.runs) == 1 and next(iter(fake.runs.values()))["status"] == "FINISHED"
    starts = [c[2] for c in fake.calls if c[0] == "start_run"]
    assert starts[1]["run_id"] == "mlrun-0"
    assert sum(c[0] == "log_params" for c in fake.calls) == 1  # params once, from the first start


def test_a_failing_tracker_never_stops_training(tmp_path, caplog, fake_url):
    from skillopt.report.tracking import MlflowTracker, make_tracker

    fake = FakeMlflow(fail_on="log_metrics")
    summary = train_in_process(tmp_path, [MlflowTracker(tmp_path / "runs", mlflow=fake, local_root=tmp_path)], fake_url)
    assert summary.status == "finished"
    assert "mlflow tracking turned off after an error: ConnectionError" in caplog.text
    assert sum(c[0] == "log_metrics" for c in fake.calls) == 1
    with pytest.raises(Exception, match="unknown tracker 'wandb': choose one of mlflow"):
        make_tracker("wandb", tmp_path)


def test_missing_mlflow_names_the_extra(tmp_path, monkeypatch):
    from skillopt.errors import MissingExtra
    from skillopt.report.tracking import make_tracker

    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if mlflow were not installed
    with pytest.raises(MissingExtra, match=r'tracking with --track mlflow needs the .mlflow. extra.*pip install "skillopt\[mlflow\]"'):
        make_tracker("mlflow", tmp_path)


@pytest.mark.slow
def test_mlflow_tracker_with_real_mlflow(tmp_path, fake_url):
    mlflow = pytest.importorskip("mlflow")
    from skillopt.report.tracking import MlflowTracker

    train_in_process(tmp_path, [MlflowTracker(tmp_path / "runs", local_root=tmp_path)], fake_url)
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}")
    (run,) = mlflow.search_runs(experiment_names=["skillopt"], output_format="list")
    assert run.info.status == "FINISHED" and run.data.tags["skillopt.run_id"] == "codes"
    assert run.data.params["train.epochs"] == "2" and run.data.metrics["best_test_hard"] == 1.0
    history = mlflow.MlflowClient().get_metric_history(run.info.run_id, "val")
    assert [(m.step, m.value) for m in history] == [(1, 0.0), (2, 1.0)]
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id, "skills")}
    assert "skills/v000.md" in artifacts and len(artifacts) >= 4


# what the optimizer tried, the chart's legend and ticks, the heatmap's links, cost --------------------------
def _report_dom(runs: Path, tmp_path: Path) -> tuple[str, Dom]:
    page = tmp_path / "report.html"
    r = cli("report", "codes", "-o", str(page), runs_dir=runs)
    assert r.exit_code == 0, r.stderr
    html = page.read_text()
    return html, Dom(html)


def _svg(html: str, chart_id: str) -> str:
    return html.split(f'id="{chart_id}"', 1)[1].split("</svg>", 1)[0]


def test_report_shows_every_candidate_and_why_it_was_kept_or_not(tmp_path_factory, tmp_path):
    html, dom = _report_dom(copy_runs(tmp_path_factory, tmp_path), tmp_path)
    steps = html.split('id="candidates"', 1)[1].split("</section>", 1)[0]
    one, two = steps.split('id="step-2"', 1)
    assert "Step 1" in one and "(epoch 1)" in one and "Step 2" in two and "(epoch 2)" in two
    # step 1: the useless edit, its rationale, its screen, not kept and why
    assert '<pre class="edit-text">Be concise and polite.</pre>' in one and "add at the end: style" in one
    assert "not kept: no better than the incumbent on the train tasks it came from (0 vs 0), so never gated" in one
    assert one.count("<tr><td>item-") == 4  # the screen, per train task
    assert "end of epoch 1" in one and "consolidation" in one and "not kept: difference +0.000" in one
    # step 2: the rule, kept by the gate, with every pair behind the decision
    assert '<pre class="edit-text">Secret codes are ZETA- followed by the item number.</pre>' in two
    assert "kept: the gate accepted it (8 wins, 0 losses: p = 0.0039" in two
    pairs = two.split('class="mini pairs"', 1)[1].split("</table>", 1)[0]
    assert pairs.count(">win</td>") == 8
    assert len(dom.find("div", class_="candidate")) == 4  # 2 candidates + 2 consolidations


def test_validation_chart_legend_matches_its_marks_with_train_line_epochs_and_readable_ticks(tmp_path_factory, tmp_path):
    html, _ = _report_dom(copy_runs(tmp_path_factory, tmp_path), tmp_path)
    svg = _svg(html, "validation-chart")
    marks = set(re.findall(r'<(circle|polygon) class="candidate [a-z]+"[^>]*?fill="(#[0-9a-f]+)" stroke="(#[0-9a-f]+)"', svg))
    legend = set(re.findall(r'<(circle|polygon) class="legend-mark"[^>]*?fill="(#[0-9a-f]+)" stroke="(#[0-9a-f]+)"', svg))
    assert marks and marks == legend  # one legend entry per style drawn, drawn the same way
    assert 'data-series="incumbent train (step batch)"' in svg and 'stroke-dasharray="5 4"' in svg
    assert re.findall(r"end of epoch (\d)", svg) == ["1", "2"]
    for chart in ("validation-chart", "tokens-chart"):
        part = _svg(html, chart)
        labels = part.split('class="labels"', 1)[1]
        xs = [float(x) for x, _ in re.findall(r'<text x="([\d.]+)" y="[\d.]+" text-anchor="middle">([^<]+)</text>', labels)]
        assert xs and all(b - a >= 30 for a, b in zip(xs[:-1], xs[1:-1])), (chart, xs)  # no crowded x ticks
        ys = re.findall(r'text-anchor="end">([^<]+)</text>', labels)
        assert ys and all(len(y) <= 5 for y in ys), (chart, ys)  # 0, 0.25, 2.5k: never 0.0063


def test_heatmap_cells_open_their_rollouts_in_the_page(tmp_path_factory, tmp_path):
    html, dom = _report_dom(copy_runs(tmp_path_factory, tmp_path), tmp_path)
    links = [a["href"][1:] for a in dom.find("a", class_="cell-link")]
    cells = len(dom.find("rect", class_="cell")) - len(dom.find("rect", class_="missing"))
    assert links and len(links) == cells
    ids = {a.get("id") for _, a in dom.tags if a.get("id")}
    assert set(links) <= ids
    one = html.split(f'id="{links[0]}"', 1)[1].split('class="card rollout"', 1)[0]
    assert "Answer:" in one and "trace summary (what the optimizer reads)" in one and "skill: given in the system prompt" in one
    task = int(one.split("<b>item-", 1)[1].split("</b>", 1)[0])  # the task's prompt, above its rollouts
    assert f'prompt:</p><pre class="prompt">What is the secret code of item {task}?' in one, one[:600]
    assert ".rollout:target { display: block;" in html and "<script" not in html


def test_cost_chart_ends_at_the_usage_table(tmp_path):
    from tests.fakes.server import FakeModelServer
    from tests.helpers import cli_env, run_cli, write_jsonl
    from tests.test_train_e2e import Scripted, _run_args, code_tasks

    data = write_jsonl(tmp_path / "codes.jsonl", code_tasks(16))
    prices = "models.prices={'openai-compatible:fake-target': [1.0, 2.0], 'openai-compatible:fake-opt': [3.0, 4.0]}"
    with FakeModelServer(Scripted()) as srv:
        r = run_cli([*_run_args(data, srv.openai_url, "codes"), "--set", prices], tmp_path, cli_env(tmp_path))
    assert r.returncode == 0, r.stderr
    html, _ = _report_dom(tmp_path / "runs", tmp_path)
    cost = _svg(html, "cost-chart")
    last = dict(re.findall(r'data-series="([^"]+)" data-last="([^"]+)"', cost))
    table = html.split('id="usage-table"', 1)[1].split("</table>", 1)[0]
    costs = dict(re.findall(r"<tr><td>(\w+)</td>.*?<td class=\"num\">\$([\d.]+)</td></tr>", table, re.S))
    assert set(last) == {"target", "optimizer"} and set(costs) == {"target", "optimizer"}
    for role in ("target", "optimizer"):
        assert f"{float(last[role]):.4f}" == costs[role], (role, last, costs)
    assert ">end</text>" in cost


def test_screenshot_shows_the_edit_texts(tmp_path_factory, tmp_path):
    """The edit texts are on screen: the same page with only their text made transparent renders
    differently, in the region of the candidates, and Chromium logs nothing."""
    from PIL import Image, ImageChops

    html, dom = _report_dom(copy_runs(tmp_path_factory, tmp_path), tmp_path)
    edits = [t for t in re.findall(r'<pre class="edit-text">([^<]*)</pre>', html)]
    assert edits == ["Be concise and polite.", "Secret codes are ZETA- followed by the item number."]
    hidden = tmp_path / "hidden.html"
    hidden.write_text(html.replace("</head>", "<style>.edit-text { color: transparent !important; }</style></head>"))
    shots = []
    for name, page in (("shown", tmp_path / "report.html"), ("hidden", hidden)):
        shot = tmp_path / f"{name}.png"
        r = open_in_chromium(page, tmp_path, f"--screenshot={shot}", "--window-size=1280,3200")
        assert r.returncode == 0 and shot.exists(), r.stderr
        assert console_messages(r.stderr) == []
        shots.append(Image.open(shot).convert("RGB"))
    diff = ImageChops.difference(*shots)
    box = diff.getbbox()
    assert box is not None, "the edit texts are not drawn anywhere on the page"
    changed = sum(diff.convert("L").point(lambda v: 255 if v else 0).histogram()[255:])
    assert changed > 300  # two lines of monospace text, not a stray pixel
    assert box[1] > 300 and box[3] < 3200  # below the header, on the first screens
