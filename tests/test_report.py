"""autotune report (HTML with plotly figures, PNGs) and Optuna's own CLI on our studies."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import MODELS, run_cli, served_dashboard

from autotune.html_report import KINDS

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def made_study(tmp_path_factory):
    """A real 6-trial study of the tiny model in which trial 1 fails (NaN loss) and trial 2 is the fastest
    but infeasible (its loss is far above the baseline's; every other trial sleeps 0.2 ms per sample)."""
    folder = tmp_path_factory.mktemp("report")
    run_cli(["search", MODELS / "tiny.py", "--trials", 6, "--samples", 512, "--storage", f"sqlite:///{folder / 'tiny.db'}",
             "--study-name", "tiny", "--out", folder / "tiny.best.yaml"], cwd=folder,
            env={"TINY_FAULTS": "1:nan,2:fast_infeasible", "TINY_SAMPLE_SLEEP": "0.0002"}, check_rc=0)
    return folder


def plotly_figures(page: str) -> dict[str, list[dict]]:
    """figure name -> its plotly traces, read back from the page's ``Plotly.newPlot`` calls."""
    decoder = json.JSONDecoder()
    out = {}
    for match in re.finditer(r'Plotly\.newPlot\(\s*"figure-(\w+)",\s*', page):
        traces, _ = decoder.raw_decode(page, match.end())
        out[match.group(1)] = traces
    return out


def plotly_layouts(page: str) -> dict[str, dict]:
    """figure name -> its plotly layout, read back from the page's ``Plotly.newPlot`` calls."""
    decoder = json.JSONDecoder()
    out = {}
    for match in re.finditer(r'Plotly\.newPlot\(\s*"figure-(\w+)",\s*', page):
        _, end = decoder.raw_decode(page, match.end())
        out[match.group(1)], _ = decoder.raw_decode(page, re.compile(r",\s*").match(page, end).end())
    return out


def test_the_report_holds_every_figure_with_its_traces(made_study):
    import optuna

    r = run_cli(["report", "tiny.db"], cwd=made_study, check_rc=0)
    page = (made_study / "tiny.report.html").read_text()
    assert "written to" in r.stdout and "6 of 6 figures" in r.stdout
    figures = plotly_figures(page)
    assert set(figures) == {"history", "batch_throughput", "pareto", "importances", "loss_curves", "failures"}
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{made_study / 'tiny.db'}")
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    # history: Optuna's own figure, one point per complete trial (feasible ones, and the infeasible
    # ones apart: Optuna reads the loss-tolerance constraint stored on each trial)
    points = [y for t in figures["history"] if t["name"] in (KINDS["feasible"], KINDS["infeasible"]) for y in t["y"]]
    assert sorted(points) == sorted(t.user_attrs["samples_per_sec"] for t in complete)
    feasible = [t.user_attrs["samples_per_sec"] for t in complete if t.user_attrs["feasible"]]
    assert sorted(figures["history"][0]["y"]) == sorted(feasible)
    # throughput against batch size: a legend group per precision that ran (a trace per kind of trial in
    # it), every complete trial once, the batch sizes run as the ticks
    precisions = {t.user_attrs["config"]["precision"] for t in complete}
    assert {t["legendgroup"] for t in figures["batch_throughput"]} == precisions
    assert {t["name"] for t in figures["batch_throughput"]} <= set(KINDS.values())
    assert sum(len(t["x"]) for t in figures["batch_throughput"]) == len(complete)
    sizes = sorted({t.user_attrs["config"]["batch_size"] for t in complete})
    assert plotly_layouts(page)["batch_throughput"]["xaxis"]["tickvals"] == sizes
    # the Pareto figure marks the recommendation and the baseline
    names = [t["name"] for t in figures["pareto"]]
    assert "baseline (trial 0)" in names and any(n.startswith("recommended (trial ") for n in names)
    assert "Pareto front" in names
    # importances: a bar per searched parameter
    assert set(figures["importances"][0]["y"]) <= set(study.user_attrs["autotune"]["space"])
    # loss curves: the baseline's among them, against samples
    baseline_curve = [t for t in figures["loss_curves"] if t["name"].startswith("trial 0 (baseline")]
    assert baseline_curve and baseline_curve[0]["x"][-1] == study.trials[0].user_attrs["loss_curve"][-1][0]
    # failures: the NaN trial under its kind
    assert figures["failures"][0]["x"] == ["nonfinite_loss"] and figures["failures"][0]["y"] == [1]
    # self-contained: plotly.js inline, no script, style or image fetched from anywhere
    assert not external_resources(page)
    import plotly

    assert plotly.offline.get_plotlyjs()[:2000] in page


def external_resources(page: str) -> list[str]:
    """``src``/``href`` of script, link and img tags (script bodies are not parsed as tags)."""
    from html.parser import HTMLParser

    found = []

    class Parser(HTMLParser):
        def handle_starttag(self, tag, attrs):
            found.extend(v for k, v in attrs if tag in ("script", "link", "img", "iframe") and k in ("src", "href") and v)

    Parser().feed(page)
    return found


def test_a_study_with_one_trial_gets_figures_or_the_reason_each_is_missing(tmp_path):
    run_cli(["search", MODELS / "tiny.py", "--trials", 1, "--samples", 256, "--storage", f"sqlite:///{tmp_path / 'one.db'}",
             "--study-name", "one"], cwd=tmp_path, check_rc=0)
    r = run_cli(["report", "one.db", "--out", tmp_path / "one.html"], cwd=tmp_path, check_rc=0)
    page = (tmp_path / "one.html").read_text()
    assert "Parameter importances need at least 3 full-budget trials" in page and "No trial failed." in page
    assert set(plotly_figures(page)) == {"history", "batch_throughput", "pareto", "loss_curves"}
    assert "4 of 6 figures" in r.stdout


def test_report_bad_paths_are_one_line_errors(made_study, tmp_path):
    r = run_cli(["report", made_study / "tiny.db", "--out", tmp_path], cwd=tmp_path)
    assert r.returncode == 2 and "is a folder; give a file path" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = run_cli(["report", made_study / "tiny.db", "--out", tmp_path / "nope" / "r.html"], cwd=tmp_path)
    assert r.returncode == 2 and "folder" in r.stderr and "does not exist" in r.stderr
    r = run_cli(["report", made_study / "tiny.db", "--out", ""], cwd=tmp_path)
    assert r.returncode == 2 and "--out is empty" in r.stderr
    (tmp_path / "afile").write_text("keep")
    r = run_cli(["report", made_study / "tiny.db", "--out", tmp_path / "r.html", "--png", tmp_path / "afile"], cwd=tmp_path)
    assert r.returncode == 2 and "is not a folder" in r.stderr and not (tmp_path / "r.html").exists()  # checked before writing
    r = run_cli(["report", made_study / "tiny.db", "--out", "/proc/report.html"], cwd=tmp_path)
    assert r.returncode == 2 and "cannot write the report to '/proc/report.html'" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def _chromium():
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def test_a_png_whose_page_script_had_not_loaded_is_rendered_again_and_other_errors_are_one_line(tmp_path):
    pytest.importorskip("kaleido")
    from autotune.errors import UsageError
    from autotune.report_png import write_pngs

    class Figure:  # a plotly figure's write_image, failing as kaleido does
        def __init__(self, errors):
            self.errors, self.calls = list(errors), 0

        def write_image(self, path, width, height):
            self.calls += 1
            if self.errors:
                raise RuntimeError(self.errors.pop(0))
            Path(path).write_bytes(b"\x89PNG\r\n\x1a\n")

    flaky = Figure(["{'description': 'ReferenceError: kaleido_scopes is not defined'}"])
    assert write_pngs({"history": flaky, "skipped": "no data yet"}, tmp_path) == [tmp_path / "history.png"] and flaky.calls == 2
    missing = Figure(["BrowserFailedError: no Chrome found"])
    with pytest.raises(UsageError, match=r"kaleido could not render \(BrowserFailedError: no Chrome found\)"):
        write_pngs({"pareto": missing}, tmp_path)
    assert missing.calls == 1  # not retried: a missing browser stays missing
    twice = Figure(["kaleido_scopes is not defined"] * 2)
    with pytest.raises(UsageError, match="is not defined"):
        write_pngs({"pareto": twice}, tmp_path)
    assert twice.calls == 2


@pytest.mark.skipif(not _chromium(), reason="--png needs Chrome or Chromium (the CI installs Debian's chromium)")
def test_png_figures_are_written(made_study, tmp_path):
    r = run_cli(["report", made_study / "tiny.db", "--out", tmp_path / "r.html", "--png", tmp_path / "png"], cwd=tmp_path,
                env={"BROWSER_PATH": _chromium()}, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    pngs = sorted(p.name for p in (tmp_path / "png").glob("*.png"))
    assert pngs == sorted(f"{n}.png" for n in ("history", "batch_throughput", "pareto", "importances", "loss_curves", "failures"))
    assert all((tmp_path / "png" / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and (tmp_path / "png" / p).stat().st_size > 5000 for p in pngs)


def test_optuna_s_own_cli_reads_autotune_studies(made_study):
    from autotune.study import load_study, recommendation

    optuna_cli = [os.path.join(os.path.dirname(sys.executable), "optuna")]  # the console script beside this Python
    url = f"sqlite:///{made_study / 'tiny.db'}"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    studies = subprocess.run([*optuna_cli, "studies", "--storage", url, "-f", "json"], capture_output=True, text=True, env=env)
    assert studies.returncode == 0, studies.stderr
    listed = json.loads(studies.stdout)
    assert [(s["name"], s["n_trials"]) for s in listed] == [("tiny", 6)]
    best = subprocess.run([*optuna_cli, "best-trial", "--study-name", "tiny", "--storage", url, "-f", "json"], capture_output=True, text=True, env=env)
    assert best.returncode == 0, best.stderr
    study, settings = load_study("tiny", url)
    recommended, _ = recommendation(study, settings)
    # Optuna's best trial honours the loss-tolerance constraint we store: it is our recommendation,
    # not the faster infeasible trial 2
    assert json.loads(best.stdout)["number"] == recommended.number != 2
    faster = study.trials[2]
    assert faster.user_attrs["feasible"] is False and faster.values[0] > recommended.values[0]


CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--hide-scrollbars", "--window-size=1400,1000",
]


def browse(url, tmp_path, screenshot=None, offline=False):
    """Load ``url`` in headless Chromium, let its scripts run, and return the rendered DOM as text."""
    flags = [*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}", "--virtual-time-budget=20000"]
    if offline:  # no host name resolves: anything the page fetched from the network would fail
        flags.append("--host-resolver-rules=MAP * ~NOTFOUND")
    dom = subprocess.run([_chromium(), *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
    if screenshot:
        subprocess.run([_chromium(), *flags, f"--screenshot={screenshot}", url], capture_output=True, timeout=120)
        assert screenshot.read_bytes()[:4] == b"\x89PNG"
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", re.sub(r"<(style|script)\b.*?</\1>", " ", dom, flags=re.S)))


@pytest.mark.skipif(not _chromium(), reason="the browser test needs Chromium (the CI installs Debian's chromium)")
def test_the_dashboard_and_the_report_render_in_a_real_browser(made_study, tmp_path):

    import optuna

    db = tmp_path / "both.db"
    shutil.copy(made_study / "tiny.db", db)  # single objective, trial 1 failed (NaN), trial 2 the fastest but infeasible
    run_cli(["search", MODELS / "tiny.py", "--trials", 4, "--samples", 512, "--storage", f"sqlite:///{db}", "--study-name", "front",
             "--objective", "pareto", "--out", tmp_path / "front.yaml"], cwd=tmp_path,
            env={"TINY_FAULTS": "1:raise,2:fast_infeasible", "TINY_SAMPLE_SLEEP": "0.0002"}, check_rc=0)
    for name in ("tiny", "front"):  # autotune does not prune yet: a pruned trial added through Optuna's API
        study = optuna.load_study(study_name=name, storage=f"sqlite:///{db}")
        study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.PRUNED, params=study.trials[0].params,
                                                  distributions=study.trials[0].distributions))
    with served_dashboard(db, tmp_path) as (port, studies):
        ids = {s["study_name"]: s["study_id"] for s in studies}
        for name, _failed in (("tiny", 1), ("front", 1)):
            study = optuna.load_study(study_name=name, storage=f"sqlite:///{db}")
            base = f"http://127.0.0.1:{port}/dashboard/studies/{ids[name]}"
            trials_page = browse(f"{base}/trials", tmp_path, screenshot=tmp_path / f"dashboard-{name}-trials.png")
            assert f"{len(study.trials)} Trials" in trials_page
            assert all(f"Trial {t.number} " in trials_page for t in study.trials)
            assert "Fail" in trials_page and "Pruned" in trials_page
            note = browse(f"{base}/note", tmp_path, screenshot=tmp_path / f"dashboard-{name}-note.png")
            from autotune.study import load_study, recommendation

            recommended, _ = recommendation(*load_study(name, f"sqlite:///{db}"))
            assert f"autotune recommendation: trial {recommended.number}" in note
            overview = browse(base, tmp_path, screenshot=tmp_path / f"dashboard-{name}.png")
            assert ("Pareto Front" in overview) == (name == "front")
            # the loss-tolerance constraint as the dashboard reads it: trial 2, faster than the recommendation
            # (on the unconstrained Pareto front too), is drawn infeasible and is no best trial; the best
            # trials are Optuna's feasible ones, and the single-objective one is autotune's recommendation
            faster = study.trials[2]
            assert faster.user_attrs["feasible"] is False and faster.values[0] > recommended.values[0]
            assert "Infeasible" in overview  # the timeline's legend: a state of its own
            best = {t.number for t in study.best_trials}
            assert recommended.number in best and faster.number not in best
            for t in study.trials:
                assert (f"Trial {t.number} Complete Best Trial" in trials_page) == (t.number in best), (t.number, best)
            if name == "tiny":
                assert f"Best Trial (number={recommended.number})" in overview
    # the report, opened from disk with no network: every figure is drawn by the inline plotly.js
    run_cli(["report", "front", "--storage", f"sqlite:///{db}", "--out", tmp_path / "front.html"], cwd=tmp_path, check_rc=0)
    page = browse((tmp_path / "front.html").as_uri(), tmp_path, screenshot=tmp_path / "report-front.png", offline=True)
    assert "autotune report: study front" in page
    dom = subprocess.run([_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'p2'}", "--virtual-time-budget=20000",
                          "--host-resolver-rules=MAP * ~NOTFOUND", "--dump-dom", (tmp_path / "front.html").as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    drawn = set(re.findall(r'id="figure-(\w+)"[^>]*class="[^"]*js-plotly-plot', dom)) | set(re.findall(r'class="[^"]*js-plotly-plot[^"]*"[^>]*id="figure-(\w+)"', dom))
    assert drawn == set(plotly_figures((tmp_path / "front.html").read_text())) and len(drawn) >= 5


def test_yaml_rows_write_a_shared_value_out_not_as_an_alias():
    import yaml

    from autotune.report import render_rows

    applied = {"pin_memory": False, "compiled": False}
    text = render_rows([{"number": 0, "applied": applied, "ranks_applied": applied}], "yaml")
    assert "&id" not in text and "*id" not in text
    assert yaml.safe_load(text) == [{"number": 0, "applied": applied, "ranks_applied": applied}]


def test_a_trial_failed_as_stale_shows_its_reason_from_the_study():
    """A new user's report: a killed worker's trial showed "None" as its reason; the stale callback
    records it on the study (a FAIL trial cannot be changed), and the rows read it from there."""
    from study.helpers import add, make_study

    from autotune.report import trial_rows

    study = make_study()
    add(study, baseline=True)
    stale = add(study, state="FAIL", sps=None, loss=None)
    study.set_user_attr(f"stale_trial_{stale.number}", "stale: its worker stopped sending heartbeats; retried once")
    rows = {r["number"]: r for r in trial_rows(study)}
    assert rows[stale.number]["fail_reason"] == "stale: its worker stopped sending heartbeats; retried once"
    assert rows[0]["fail_reason"] is None  # a completed trial has none, whatever the study holds


def test_a_race_winners_row_says_it_is_its_median_paired_run():
    """A new user read the recommended row, a paired run at the confirmation budget, as "the slowest run"."""
    from study.helpers import add, make_study, race

    from autotune.report import trial_rows
    from autotune.study import recommendation
    from autotune.study.settings import settings_of

    study = make_study()
    add(study, 100.0, baseline=True)
    candidate = add(study, 300.0, batch_size=64)
    race(study, candidate.number, [100.0, 101.0, 99.0], [200.0, 210.0, 190.0])
    recommended, _ = recommendation(study, settings_of(study))
    assert recommended.user_attrs["pair_of"] == candidate.number
    rows = {r["number"]: r for r in trial_rows(study, recommended.number)}
    assert rows[recommended.number]["note"].startswith(f"recommended (its median paired run) confirms #{candidate.number}")
    assert rows[candidate.number]["note"] == ""  # the search trial it confirms is not the recommendation
