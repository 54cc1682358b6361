"""The report's figures (autotune.html_report) on studies built without training, and what Optuna and
optuna-dashboard make of the same trials (issue 16, items 15-19)."""

import optuna
import pytest
from conftest import dashboard_api, served_dashboard
from study.helpers import add, make_study, race  # tests/study/helpers.py
from test_report import CHROMIUM_FLAGS, _chromium, plotly_figures, plotly_layouts

from autotune.html_report import KINDS, MARKS, build_figures
from autotune.study import recommendation
from autotune.study.settings import settings_of

SPACE = {
    "batch_size": {"choices": [16, 32, 64, 128, 256, 512]},
    "precision": {"choices": ["32-true", "bf16-mixed"]},
    "num_workers": {"low": 0, "high": 4},
    "lr": {"low": 0.005, "high": 0.5, "log": True},
}
#: The short screening run faster than every full-budget trial (its loss, after a quarter of the samples, not judged).
FAST_SHORT = 1000.0


def speed(batch_size: int, num_workers: int) -> float:
    """samples/s of a config in these studies: loader workers give the speed-ups, the batch a little, lr none."""
    return 100.0 * (1 + num_workers) * (1 + batch_size / 1000)


def staged_study(storage=None, confirmed=True):
    """A ``--search staged`` study as autotune stores it: trial 0 the baseline; 23 short screening runs of the
    system knobs at the baseline's lr (one, bf16-mixed, faster than anything else); 12 full-budget stage-2
    trials whose speed comes from num_workers (3 of them above the loss tolerance) and whose lr varies; a
    duplicate; then paired confirmation runs of the fastest feasible config against the baseline."""
    study = make_study(storage, space=SPACE)
    add(study, 100.0, 1.0, baseline=True)
    short = {"stage": "system", "trial_samples": 256}
    for precision in ("32-true", "bf16-mixed"):
        for batch_size in (16, 32, 64, 128):
            for workers in (0, 1, 2):
                if (precision, batch_size, workers) == ("bf16-mixed", 128, 2):
                    add(study, FAST_SHORT, 1.9, attrs=short, batch_size=batch_size, num_workers=workers, precision=precision)
                elif (precision, batch_size, workers) != ("32-true", 16, 0):  # the baseline's point
                    add(study, speed(batch_size, workers), 1.6, attrs=short, batch_size=batch_size, num_workers=workers,
                        precision=precision)
    full = []
    for k, lr in enumerate((0.3, 0.012, 0.08, 0.006, 0.2, 0.03, 0.45, 0.009, 0.05, 0.15, 0.02, 0.1)):
        batch_size, workers = (32, 64)[k % 2], k % 3
        loss = 1.2 if k in (2, 6, 9) else 1.0
        full.append(add(study, speed(batch_size, workers) + k / 10, loss, attrs={"stage": "full"}, batch_size=batch_size,
                        num_workers=workers, lr=lr))
    best = max((t for t in full if t.user_attrs["feasible"]), key=lambda t: t.user_attrs["samples_per_sec"])
    add(study, best.user_attrs["samples_per_sec"], 1.0, attrs={"duplicate_of": best.number, "stage": "full"},
        **{k: v for k, v in best.user_attrs["config"].items() if k in ("batch_size", "num_workers", "lr")})
    if confirmed:
        race(study, best.number, [99.0, 101.0, 100.0], [300.0, 306.0, 303.0])
    return study


def figures(study):
    settings = settings_of(study)
    recommended, baseline = recommendation(study, settings)
    return build_figures(study, settings, recommended, baseline), recommended, baseline


def by_kind(fig):
    """Trace name -> the trial numbers its points' hover text names (every drawn point of the figure)."""
    out = {}
    for trace in fig.data:
        for text in trace.text or ():
            out.setdefault(trace.name, []).append(int(text.split("<br>")[0].removeprefix("trial ")))
    return out


def test_the_batch_size_axis_is_labelled_with_the_batch_sizes_run():  # item 15
    study = staged_study()
    figs, _, _ = figures(study)
    axis = figs["batch_throughput"].layout.xaxis
    sizes = sorted({t.user_attrs["config"]["batch_size"] for t in study.trials})
    assert sizes == [16, 32, 64, 128]
    assert axis.type == "log" and list(axis.tickvals) == sizes and list(axis.ticktext) == ["16", "32", "64", "128"]


def test_short_screening_runs_have_a_mark_and_a_legend_entry_of_their_own():  # item 16
    study = staged_study()
    figs, _, _ = figures(study)
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    short = sorted(t.number for t in complete if "trial_samples" in t.user_attrs)
    infeasible = sorted(t.number for t in complete if t.user_attrs["feasible"] is False)
    assert len(short) == 23 and len(infeasible) == 3
    assert len(set(MARKS.values())) == 3 and MARKS["infeasible"] == "x" and MARKS["short"] not in ("x", "circle")
    # throughput against batch size: a legend group per precision, a trace per kind with its own mark and name
    fig = figs["batch_throughput"]
    for trace in fig.data:
        kind = next(k for k, name in KINDS.items() if name == trace.name)
        assert trace.marker.symbol == MARKS[kind] and trace.legendgroup == trace.legendgrouptitle.text
    assert {(t.legendgroup, t.name) for t in fig.data} == {
        ("32-true", KINDS["feasible"]), ("32-true", KINDS["infeasible"]), ("32-true", KINDS["short"]), ("bf16-mixed", KINDS["short"])}
    drawn = by_kind(fig)
    assert sorted(drawn[KINDS["short"]]) == short and sorted(drawn[KINDS["infeasible"]]) == infeasible
    assert sorted(n for numbers in drawn.values() for n in numbers) == sorted(t.number for t in complete)
    assert all("short screening run (256 samples): loss not judged" in text for t in fig.data if t.name == KINDS["short"] for text in t.text)
    # history: Optuna draws a short run as infeasible (it fails its constraint); here it has the same mark apart
    history = {t.name: t for t in figs["history"].data}
    assert list(history[KINDS["short"]].x) == short and history[KINDS["short"]].marker.symbol == MARKS["short"]
    assert sorted(history[KINDS["infeasible"]].x) == infeasible and history[KINDS["infeasible"]].marker.symbol == MARKS["infeasible"]
    assert sorted([*history[KINDS["feasible"]].x, *history[KINDS["infeasible"]].x, *short]) == sorted(t.number for t in complete)
    # the Pareto figure holds the full-budget trials only: a short run's loss is not comparable
    pareto = [n for numbers in by_kind(figs["pareto"]).values() for n in numbers]
    assert not set(short) & set(pareto) and FAST_SHORT not in [x for t in figs["pareto"].data for x in t.x]


def test_the_baseline_and_the_recommendation_are_named_as_the_summary_names_them(tmp_path):  # item 17
    from autotune.html_report import write_report

    study = staged_study()
    figs, recommended, baseline = figures(study)
    base_runs = [t.number for t in study.trials if t.user_attrs.get("confirm_of") == 0]
    of = recommended.user_attrs["confirm_of"]
    assert baseline.number in base_runs and baseline.number != 0  # the point drawn: the baseline's median paired run
    names = [t.name for t in figs["pareto"].data]
    assert f"baseline (trial 0; its median paired run {baseline.number})" in names
    assert f"recommended (trial {recommended.number}, the config of trial {of}; its median paired run)" in names
    settings = settings_of(study)
    page = tmp_path / "r.html"
    write_report(study, settings, page, recommended, baseline)
    text = page.read_text()
    # the terminal summary's words: "recommended: trial R (the config of trial C, confirmed): 3.03x faster [...] over 3 pair(s) of runs"
    assert f"Recommended: trial {recommended.number} (the config of trial {of}, confirmed): 3.03x faster [" in text
    assert f"over 3 pair(s) of runs vs the baseline (trial 0; its median paired run {baseline.number})" in text
    assert f"(trial {baseline.number}" not in text.split("<h2")[0]
    # without confirmation runs the baseline is trial 0 itself
    figs, recommended, baseline = figures(staged_study(confirmed=False))
    assert baseline.number == 0 and "baseline (trial 0)" in [t.name for t in figs["pareto"].data]
    assert f"recommended (trial {recommended.number})" in [t.name for t in figs["pareto"].data]


def test_importances_cover_the_full_budget_trials_and_say_so():  # item 18
    import warnings

    study = staged_study()
    figs, _, _ = figures(study)
    fig = figs["importances"]
    # the baseline and the stage-2 trials
    full = [t for t in study.trials if t.number == 0 or (t.user_attrs.get("stage") == "full" and "duplicate_of" not in t.user_attrs)]
    assert len(full) == 13
    assert fig.layout.title.subtitle.text == "over 13 full-budget trials (short screening runs, confirmation runs and duplicates left out)"
    bars = dict(zip(fig.data[0].y, fig.data[0].x))
    # the knobs that vary among them (accumulate_grad_batches and precision do not), num_workers first: it gave the speed-ups
    assert set(bars) == {"num_workers", "batch_size", "lr"} and max(bars, key=bars.get) == "num_workers"
    # what the inputs were: exactly those trials
    from autotune.importance import importance_inputs

    inputs = importance_inputs(study.trials, lambda t: t.user_attrs["samples_per_sec"], True)
    assert [t.number for t in inputs.trials] == [t.number for t in full]
    # over every complete trial the short runs, all at the baseline's lr, make lr look important (what
    # optuna-dashboard's own panel shows; PED-ANOVA ranks by how params reach *low* targets, hence -samples/s)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        every = optuna.importance.get_param_importances(study, evaluator=optuna.importance.PedAnovaImportanceEvaluator(),
                                                        target=lambda t: -t.user_attrs["samples_per_sec"])
    assert max(every, key=every.get) == "lr"
    # a small study says its ranking is rough
    few = make_study(space=SPACE)
    add(few, 100.0, 1.0, baseline=True)
    for k, lr in enumerate((0.01, 0.1, 0.3)):
        add(few, speed(32, k), 1.0, num_workers=k, lr=lr)
    subtitle = figures(few)[0]["importances"].layout.title.subtitle.text
    assert subtitle.startswith("over 4 full-budget trials") and subtitle.endswith("under 10 the ranking is rough")
    # short runs alone are no importances
    screened = make_study(space=SPACE)
    add(screened, 100.0, 1.0, baseline=True)
    for k in range(4):
        add(screened, speed(32, k), 1.6, attrs={"stage": "system", "trial_samples": 256}, num_workers=k)
    assert figures(screened)[0]["importances"] == (
        "Parameter importances need at least 3 full-budget trials that differ in some parameter (1 so far; "
        "short screening runs, confirmation runs and duplicates do not count).")


def test_autotune_dashboard_s_importance_panel_is_the_report_s(tmp_path, restore_dashboard):  # item 18
    from optuna_dashboard._app import create_app

    from autotune.dashboard import _importances
    from autotune.optuna_compat import dashboard_importances

    url = f"sqlite:///{tmp_path / 'd.db'}"
    study = staged_study(url)
    figs, _, _ = figures(study)
    bars = dict(zip(figs["importances"].data[0].y, figs["importances"].data[0].x))
    storage = optuna.storages.RDBStorage(url)
    study_id = storage.get_study_id_from_name(study.study_name)
    plain = {i["name"]: i["importance"] for i in dashboard_api(create_app(storage), f"/api/studies/{study_id}/param_importances")["param_importances"][0]}
    assert max(plain, key=plain.get) == "lr"  # optuna-dashboard's own panel: every complete trial
    dashboard_importances(_importances)
    served = dashboard_api(create_app(storage), f"/api/studies/{study_id}/param_importances")["param_importances"][0]
    assert [i["name"] for i in served] == sorted(bars, key=bars.get, reverse=True)
    assert {i["name"]: i["importance"] for i in served} == pytest.approx(bars)


def test_a_short_run_is_never_best_in_optuna_s_views_and_still_ranks_stage_1(tmp_path, restore_dashboard):  # item 19
    from optuna_dashboard._app import create_app

    from autotune.optuna_compat import dashboard_honours_constraints
    from autotune.study import top_system_configs
    from autotune.study.staged import SHORT_RUN_CONSTRAINT, system_part

    url = f"sqlite:///{tmp_path / 'd.db'}"
    study = staged_study(url)
    settings = settings_of(study)
    recommended, _ = recommendation(study, settings)
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    fast = next(t for t in complete if t.user_attrs["samples_per_sec"] == FAST_SHORT)
    feasible = [t for t in complete if all(v <= 0 for v in t.constraints.values())]
    # told its samples/s, the highest value of all, with the constraint it fails: not known to be feasible
    assert fast.values == [FAST_SHORT] == [max(t.values[0] for t in complete)]
    assert fast.system_attrs["constraints"] == [SHORT_RUN_CONSTRAINT] and fast.constraints == {"0": SHORT_RUN_CONSTRAINT} and fast not in feasible
    # Optuna's best trial and its history's best-value line take feasible trials only
    assert study.best_trial.number != fast.number
    best_line = next(t for t in optuna.visualization.plot_optimization_history(study).data if t.name == "Best Value")
    assert max(best_line.y) == max(t.values[0] for t in feasible) < FAST_SHORT
    # optuna-dashboard serves the constraint its history figure reads (its best-value line: the browser test);
    # its own best trial is the largest value whatever the constraint, autotune dashboard's the recommendation
    storage = optuna.storages.RDBStorage(url)
    study_id = storage.get_study_id_from_name(study.study_name)
    detail = dashboard_api(create_app(storage), f"/api/studies/{study_id}")
    assert next(t for t in detail["trials"] if t["number"] == fast.number)["constraints"] == [SHORT_RUN_CONSTRAINT]
    assert [t["number"] for t in detail["best_trials"]] == [fast.number]
    dashboard_honours_constraints(storage, lambda name: recommendation(*_loaded(name, url))[0])
    assert [t["number"] for t in dashboard_api(create_app(storage), f"/api/studies/{study_id}")["best_trials"]] == [recommended.number]
    # the staged search still ranks stage 1 by the short runs' samples/s, and never recommends one
    assert top_system_configs(study.trials, 1) == [system_part(fast.params)]
    assert "trial_samples" not in recommended.user_attrs and recommended.user_attrs["feasible"]


def _large_study(objective="throughput", storage=None):
    """58 trials: a slow baseline of the lowest loss, 48 search trials whose loss falls as their speed rises, 6
    faster ones above the loss tolerance, each faster and worse (the Pareto front: those, the fastest
    feasible trial and the baseline), 3 failures. Every third search trial has a loss curve."""
    study = make_study(storage, space=SPACE, objective=objective)
    add(study, 100.0, 1.0, baseline=True)
    for k in range(54):
        workers, batch_size = k % 5, (16, 32, 64)[k % 3]
        curve = {"loss_curve": [[0, 2.0], [512, 1.0 + k / 100]]} if k % 3 == 0 else {}
        add(study, 120.0 + 7 * k, 1.04 - 0.0008 * k if k < 48 else 1.5 + 0.1 * (k - 48), attrs=curve, batch_size=batch_size,
            num_workers=workers, lr=0.01 + k / 200)
    for _ in range(3):
        add(study, None, None, state="FAIL", attrs={"fail_kind": "oom", "fail_reason": "out of memory"}, batch_size=512)
    return study


def _drawn_numbers(fig) -> set[int]:
    return {n for numbers in by_kind(fig).values() for n in numbers}


def test_a_study_above_the_cap_draws_the_cap_with_the_trials_that_matter_and_says_so(monkeypatch):
    import autotune.figure_sample
    import autotune.importance

    study = _large_study()
    settings = settings_of(study)
    recommended, baseline = recommendation(study, settings)
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    fastest_feasible = max((t for t in complete if t.user_attrs["feasible"]), key=lambda t: t.user_attrs["samples_per_sec"])
    assert len(complete) == 55 and baseline.number == 0 and recommended.number == fastest_feasible.number == 48
    # under the caps (2,000 points) a figure draws every trial and says nothing of a sample
    figs = build_figures(study, settings, recommended, baseline)
    assert _drawn_numbers(figs["batch_throughput"]) == {t.number for t in complete}
    assert not figs["batch_throughput"].layout.title.subtitle.text and not figs["history"].layout.title.subtitle.text
    monkeypatch.setattr(autotune.figure_sample, "MAX_DRAWN", 20)
    monkeypatch.setattr(autotune.importance, "MAX_TRIALS", 20)
    figs = build_figures(study, settings, recommended, baseline)
    kept = {0, 48}
    note = "20 of 55 trials drawn: the baseline, the recommended trial, the fastest feasible trial, and a random sample of the others (seed 0)"
    batch = _drawn_numbers(figs["batch_throughput"])
    assert len(batch) == 20 and kept <= batch and figs["batch_throughput"].layout.title.subtitle.text == note
    history = figs["history"]
    drawn = sorted(int(x) for trace in history.data for x in trace.x)
    assert len(drawn) == 20 and kept <= set(drawn) and history.layout.title.subtitle.text == note
    # the history's points are those trials' own numbers and speeds, not the in-memory copy's 0..19
    speeds = {t.number: t.user_attrs["samples_per_sec"] for t in complete}
    assert all(speeds[int(x)] == y for trace in history.data for x, y in zip(trace.x, trace.y))
    # against loss: the full-budget trials with the Pareto front kept whole
    from autotune.objective import pareto_front
    from autotune.study import records_of

    front = {r.number for r in pareto_front(records_of(study), settings.mode)}
    pareto = figs["pareto"]
    drawn_pareto = {n for trace in pareto.data if trace.name in ("Pareto front", "other trials") for n in by_kind(pareto)[trace.name]}
    assert front == {0, 48, *range(49, 55)} and front | kept <= drawn_pareto and len(drawn_pareto) == 20
    assert {n for n in by_kind(pareto)["Pareto front"]} == front
    assert pareto.layout.title.subtitle.text == note.replace("feasible trial,", "feasible trial, the Pareto front,")
    assert figs["importances"].layout.title.subtitle.text == (
        "over 20 of 55 full-budget trials, a random sample (seed 0; short screening runs, confirmation runs and duplicates left out)")
    # the same study gives the same figures
    again = build_figures(study, settings, recommended, baseline)
    assert _drawn_numbers(again["batch_throughput"]) == batch and again["importances"].data[0].x == figs["importances"].data[0].x


def test_a_pareto_study_above_the_cap_gets_the_scatter_of_a_sample(monkeypatch):
    import autotune.figure_sample

    study = _large_study("pareto")
    settings = settings_of(study)
    recommended, baseline = recommendation(study, settings)
    assert len(study.directions) == 2
    assert "Pareto front" not in [t.name for t in build_figures(study, settings, recommended, baseline)["pareto"].data]  # Optuna's figure
    monkeypatch.setattr(autotune.figure_sample, "MAX_DRAWN", 20)
    fig = build_figures(study, settings, recommended, baseline)["pareto"]
    assert {"Pareto front", "other trials"} <= {t.name for t in fig.data} and fig.layout.title.subtitle.text.startswith("20 of 55 trials drawn")


def test_autotune_report_of_a_stored_study_above_the_cap_reads_digests_and_draws_a_sample(tmp_path, monkeypatch, capfd):
    import autotune.bulk_read
    import autotune.figure_sample
    import autotune.importance
    from autotune import cli

    db = tmp_path / "large.db"
    _large_study(storage=f"sqlite:///{db}")
    monkeypatch.setattr(autotune.figure_sample, "MAX_DRAWN", 20)
    monkeypatch.setattr(autotune.importance, "MAX_TRIALS", 20)
    full_reads, original = [], autotune.bulk_read.read_trials

    def counting(*args, user_attr_keys=None, **kwargs):
        found = original(*args, user_attr_keys=user_attr_keys, **kwargs)
        if user_attr_keys is None:
            full_reads.append(len(found))
        return found

    monkeypatch.setattr(autotune.bulk_read, "read_trials", counting)
    assert cli.main(["report", str(db), "--out", str(tmp_path / "r.html")]) == 0
    assert "(6 of 6 figures) written to" in capfd.readouterr().out
    page = (tmp_path / "r.html").read_text()
    traces, layouts = plotly_figures(page), plotly_layouts(page)
    note = "20 of 55 trials drawn: the baseline, the recommended trial, the fastest feasible trial,"
    for name in ("history", "batch_throughput", "pareto"):
        assert layouts[name]["title"]["subtitle"]["text"].startswith(note), name
    assert sum(len(t["x"]) for t in traces["batch_throughput"]) == 20
    assert layouts["importances"]["title"]["subtitle"]["text"].startswith("over 20 of 55 full-budget trials, a random sample")
    # the loss curves of the five fastest feasible trials that have one (trials 46, 43, 40, 37, 34) and the baseline's none
    assert [t["name"] for t in traces["loss_curves"]] == ["trial 46", "trial 43", "trial 40", "trial 37", "trial 34"]
    # read in full: the recommended trial and the baseline, then the ten fastest feasible trials (for their curves;
    # three have one), then the next twenty
    assert full_reads == [2, 10, 20]
    assert "55 trials: 55 complete" not in page and "58 trials: 55 complete, 3 fail" in page


def test_drawn_trials_samples_the_preferred_trials_too_when_they_alone_are_more_than_the_cap():
    from types import SimpleNamespace

    from autotune.figure_sample import drawn_note, drawn_trials

    trials = [SimpleNamespace(number=n) for n in range(100)]
    drawn = drawn_trials(trials, always={3, 97}, prefer=set(range(40, 80)), cap=10)
    numbers = [t.number for t in drawn.trials]
    assert len(numbers) == 10 and {3, 97} <= set(numbers) and set(numbers) - {3, 97} <= set(range(40, 80))
    assert drawn_note(drawn, "the baseline", "the Pareto front") == (
        "10 of 100 trials drawn: the baseline, and a random sample of the others (seed 0); 32 of the Pareto front left out, too many to draw")
    assert [t.number for t in drawn_trials(trials, always={3}, cap=100).trials] == list(range(100))
    assert drawn_note(drawn_trials(trials, cap=100), "the baseline") is None


def _loaded(name, url):
    from autotune.study import load_study

    return load_study(name, url)


def _dom(url, tmp_path, screenshot=None, size="1400,1000"):
    """The DOM of ``url`` rendered by headless Chromium (scripts run, no network), and a screenshot."""
    import subprocess

    flags = [*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}", "--virtual-time-budget=20000",
             "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"]
    dom = subprocess.run([_chromium(), *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
    if screenshot:
        subprocess.run([_chromium(), *flags, f"--window-size={size}", f"--screenshot={screenshot}", url], capture_output=True, timeout=120)
        assert screenshot.read_bytes()[:4] == b"\x89PNG"
    return dom


def _part(dom, div_id):
    """The markup of one plotly figure's div, up to the next figure's."""
    import re

    start = dom.index(f'id="{div_id}"')
    following = re.compile(r'id="(figure-\w+|plot-[\w-]+|graph-[\w-]+)"').search(dom, start + 1)
    return dom[start:following.start() if following else None]


def _texts(part, cls):
    import re

    return re.findall(rf'class="{cls}"(?:><text)?[^>]*?data-unformatted="([^"]*)"', part)


def _values(part):
    """Pixel y -> value on the y axis of a rendered plotly figure (from its tick labels), and its points' and
    lines' pixel ys."""
    import re

    ticks = []
    for tag in re.findall(r'<g class="ytick"><text[^>]*>', part):
        value, y = re.search(r'data-unformatted="([-\d.]+)"', tag), re.search(r"translate\(0,([-\d.]+)\)", tag)
        ticks.append((float(value.group(1)), float(y.group(1))))
    (v0, y0), (v1, y1) = ticks[0], ticks[-1]

    def value(y):
        return v0 + (y - y0) * (v1 - v0) / (y1 - y0)

    points = [float(y) for y in re.findall(r'class="point" transform="translate\([-\d.]+,([-\d.]+)\)"', part)]
    lines = [float(y) for d in re.findall(r'class="js-line" d="([^"]+)"', part) for y in re.findall(r"[ML][-\d.]+,([-\d.]+)", d)]
    return value, points, lines


@pytest.mark.slow
@pytest.mark.skipif(not _chromium(), reason="the browser test needs Chromium (the CI installs Debian's chromium)")
def test_the_report_and_the_dashboard_draw_short_runs_apart_in_a_browser(tmp_path):  # items 15-19

    from autotune.html_report import write_report

    url = f"sqlite:///{tmp_path / 'staged.db'}"
    study = staged_study(url)
    settings = settings_of(study)
    recommended, baseline = recommendation(study, settings)
    write_report(study, settings, tmp_path / "staged.html", recommended, baseline)
    dom = _dom((tmp_path / "staged.html").as_uri(), tmp_path, screenshot=tmp_path / "report-staged.png", size="1200,4200")
    batch, history, pareto, importances = (_part(dom, f"figure-{n}") for n in ("batch_throughput", "history", "pareto", "importances"))
    assert _texts(batch, "xtick") == ["16", "32", "64", "128"]  # item 15: the batch sizes, not "2 3 4 ... 9 100"
    # item 16: a legend entry of its own in both figures that draw short runs (and none of them on the Pareto figure)
    assert _texts(batch, "legendtext") == ["32-true", KINDS["feasible"], KINDS["infeasible"], KINDS["short"], "bf16-mixed", KINDS["short"]]
    assert _texts(history, "legendtext") == [KINDS["feasible"], KINDS["infeasible"], KINDS["short"]]
    value, points, _ = _values(pareto)
    assert max(value(y) for y in points) < FAST_SHORT / 2
    # item 17: the baseline is trial 0
    # the baseline's paired runs measured 99, 101 and 100: the median is the run of 100
    base = next(t.number for t in study.trials if t.user_attrs.get("confirm_of") == 0 and t.values[0] == 100.0)
    assert f"baseline (trial 0; its median paired run {base})" in _texts(pareto, "legendtext")
    # item 18: what the importances cover, num_workers first (the top bar)
    assert _texts(importances, "gtitle-subtitle") == [
        "over 13 full-budget trials (short screening runs, confirmation runs and duplicates left out)"]
    assert _texts(importances, "ytick")[-1] == "num_workers"
    # item 19: optuna-dashboard's history draws the short run, and its best-value line stays at the best feasible value
    with served_dashboard(url, tmp_path) as (port, studies):
        overview = _dom(f"http://127.0.0.1:{port}/dashboard/studies/{studies[0]['study_id']}", tmp_path,
                        screenshot=tmp_path / "dashboard-staged.png")
    value, points, line = _values(_part(overview, "plot-history"))
    feasible = max(t.values[0] for t in study.trials if t.state.name == "COMPLETE" and t.constraints["0"] <= 0)
    assert value(min(points)) == pytest.approx(FAST_SHORT, rel=0.02)  # the short run is drawn (as infeasible)
    assert value(min(line)) == pytest.approx(feasible, rel=0.02) and feasible < FAST_SHORT / 3
    # item 18: autotune dashboard's importance panel ranks the parameters as the report does
    assert _texts(_part(overview, "graph-hyperparameter-importances"), "ytick") == _texts(importances, "ytick")


def test_a_study_without_training_loss_curves_says_why_and_how_to_get_them():
    """A new user's report: a manual-optimization module judged on val_loss read "No feasible trial has a
    recorded loss curve yet", as if more trials would draw one."""
    study = make_study(space=SPACE)
    add(study, 100.0, 1.0, baseline=True)
    add(study, 150.0, 1.0, batch_size=32)
    text = figures(study)[0]["loss_curves"]
    assert text.startswith("No feasible trial recorded a training-loss curve") and "yet" not in text
    assert "(val_loss is not: a validation metric, never read per step)" in text and "pass --monitor" in text
    drawn = make_study(space=SPACE)
    add(drawn, 100.0, 1.0, baseline=True, attrs={"loss_curve": [[64, 2.0], [128, 1.0]]})
    assert not isinstance(figures(drawn)[0]["loss_curves"], str)
