"""Entry points: ``autotune search`` (:func:`run_search`) and ``autotune worker`` (:func:`run_worker`); the
paired confirmation after a search is :mod:`autotune.study.racing`."""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import yaml

from autotune.config import TrialConfig
from autotune.errors import Interrupted, StudyMismatchError, UsageError
from autotune.export import config_from_lightning_cli
from autotune.hardware import Hardware
from autotune.jobs import SlotPools, machine_slots, measure_busy_cores, prestart, study_allotment
from autotune.loader import check_model_file
from autotune.nodes import LeaderChannel, node_identity
from autotune.objective import directions
from autotune.samplers import make_sampler
from autotune.space import params_of
from autotune.storage import check_storage_url, check_writable, freeze_read_trials, mask_url, open_storage, storage_file
from autotune.study.bounds import epoch_lines
from autotune.study.budget_lines import max_epochs_line, short_budget_line
from autotune.study.options import (
    SearchOptions,
    _env_confirm,
    _env_pruner,
    check_out_path,
    check_search_options,
    check_study_name,
    default_search,
    default_study_name,
    resolve_storage,
    run_flags,
)
from autotune.study.plan import _Plan, _take_over, continue_line, stopped_runs
from autotune.study.publish import _save_note, default_export_path, export_study
from autotune.study.queue import _resume, _resume_command, drain_queue
from autotune.study.racing import race_candidates
from autotune.study.records import _baseline_pending, configs_left, recommendation
from autotune.study.settings import (
    _METRIC_NAMES,
    BASELINE_ATTR,
    SETTINGS_ATTR,
    StudySettings,
    _check_resume,
    _create_settings,
    _study_names,
    _with_study_values,
    config_changed_line,
    settings_of,
)
from autotune.study.staged import _staged_search, _stages, screen_room
from autotune.study.tell import after_interrupt
from autotune.trial_trainer import left_out_line
from autotune.ui import UI


@dataclass
class SearchResult:
    """What a search run ended with."""

    study_name: str
    storage: str
    trials_run: int
    recommended: Any  # optuna FrozenTrial or None
    baseline: Any
    export_path: Path | None
    #: The run's optuna Study, whose storage holds every trial read so far (reusing it spares the
    #: end-of-run summary a second read of the whole study)
    study: Any = None

    def interrupted_summary(self) -> Interrupted:
        """The error for Ctrl-C (or SIGTERM) while the finished search's summary prints: where its results are."""
        written = f"; its config was written to {self.export_path}" if self.export_path else ""
        return Interrupted(
            "",
            f"while printing the summary: the search had finished{written}; "
            f"autotune show {self.study_name} --storage {mask_url(self.storage)} shows its results",
        )


def _make_sampler(settings: StudySettings, seed_offset: int, name: str | None = None):
    """The run's sampler (:func:`autotune.samplers.make_sampler`; default multivariate TPE, which reads
    each trial's loss constraint, :func:`autotune.optuna_compat.set_constraint`)."""

    # the grid's point numbering comes from its seed: every run of a study must use the same one
    offset = 0 if name == "grid" else seed_offset
    return make_sampler(name or "tpe", settings.space, int(settings.seed) + offset)


def run_search(opts: SearchOptions, ui: UI) -> SearchResult:
    """Create or resume a study and add ``opts.trials`` trials to it, then export the recommendation.

    The first trial of a new study (or of a study whose baseline never completed) is the baseline:
    the model's own config. If the baseline fails, the search stops with :class:`BaselineFailedError`
    (its failed trial stays in the study).

    Raises:
        UsageError: Bad input (file, space, storage, flags, or settings that differ from the study's).
        BaselineFailedError: The baseline trial failed.
        Interrupted: Ctrl-C; the running trial is stored as failed, finished trials are kept.
    """
    started = time.monotonic()  # the run's wall time: confirmation's budget is a share of it
    check_search_options(opts)
    if opts.num_nodes is not None and opts.num_nodes > 1:
        _search_node(opts.num_nodes, opts.node_rank, opts.node_group)
    elif opts.node_rank not in (None, 0):
        raise UsageError(
            f"--node-rank {opts.node_rank}: autotune search is always node rank 0; "
            "run `autotune worker --node-rank K` on the other nodes of a --num-nodes study"
        )
    model_file = check_model_file(opts.model_file)
    if opts.out:
        check_out_path(Path(opts.out))
    study_name = opts.study_name or default_study_name(model_file)
    check_study_name(study_name)
    storage_url = resolve_storage(opts.storage, study_name)
    check_storage_url(storage_url)  # before the model is inspected
    check_writable(storage_url)  # a read-only database is known at once
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    measure_busy_cores()  # before any child starts: the busy time is other work's
    if not opts.cold and (opts.num_nodes or 1) == 1:
        # its imports overlap opening and reading the study; a new study's inspection then runs in it
        prestart(model_file, opts.jobs)
    study, settings, seeds = _open_study(opts, model_file, study_name, storage_url, ui)
    study.sampler = _make_sampler(settings, len(study.get_trials(deepcopy=False)), opts.sampler)
    study_allotment(study, settings, opts.jobs, ui)
    busy_cores_line(settings, opts.jobs, ui)
    freeze_read_trials()
    room = opts.trials - (1 if study.user_attrs.get(BASELINE_ATTR) is None and not _baseline_pending(study) else 0)
    if len(seeds) > room:
        raise UsageError(
            f"--enqueue gives {len(seeds)} config(s), but --trials {opts.trials} leaves room for {max(0, room)} "
            "after the baseline; raise --trials"
        )
    leader = _leader(study, settings, opts.node_rank, opts.node_group, "autotune search", ui)
    search = _search_kind(settings, opts, leader)
    stopped = stopped_runs(study)  # runs stopped by Ctrl-C, SIGTERM or SIGKILL: this run finishes them
    space_line: str | None
    if stopped:
        add = sum(int(p.get("held", 0)) + int(p.get("full", 0)) for p in stopped) + _waiting(study)
        space_line = continue_line(stopped, _waiting(study))
        if seeds:
            space_line += f"; --enqueue's {len(seeds)} config(s) are queued by the next run"
    else:
        add, space_line = _trials_this_run(study, settings, opts, len(seeds), search)
    confirm = opts.confirm if opts.confirm is not None else _env_confirm()
    ui.search_started(settings, add)
    if confirm and leader is None:
        ui.info(
            f"plan: {add} trial(s){' the stopped run left' if stopped else ''} + up to {2 * opts.confirm_repeats * confirm} paired confirmation run(s) "
            f"(up to {confirm} config(s), the best feasible ones, then any larger batch on course to the baseline's loss sooner, raced against the baseline, at most {opts.confirm_repeats} pairs each), "
            f"within {opts.confirm_share:.0%} of the run's wall time"
        )
    if space_line:
        ui.info(space_line)
    for line in epoch_lines(study):  # a resumed study: batch sizes an earlier trial showed are larger than an epoch
        ui.info(line)
    if epochs := max_epochs_line(settings):
        ui.info(epochs)
    if short := short_budget_line(settings):
        ui.warn(short)
    if left_out := left_out_line(((settings.user_config or {}).get("trainer") or {}).get("callbacks")):
        ui.info(left_out)
    run_id = f"{os.getpid()}-{time.time():.0f}"
    plan = _Plan(study, run_id, search, opts.trials)
    plan.flags = run_flags(opts)
    plan.confirm_left = confirm if leader is None else 0
    plan.start()
    # one warm trial process per slot for the whole run: the search's rounds and the confirmation after
    # them fork from it (a confirmation of its own paid a second start-up, ~4 s, out of its budget)
    pools = SlotPools(settings.model_file, opts.cold, tempfile.mkdtemp(prefix="autotune-warm-"), ui)
    try:
        if stopped:
            ran = _continue(study, settings, opts, leader, storage_url, run_id, ui, stopped, plan, pools)
        else:
            ran = _search(study, settings, opts, seeds, leader, storage_url, run_id, ui, search, add, plan, pools) if add else 0
        if confirm and leader is None:
            ran += race_candidates(
                study,
                settings,
                ui,
                confirm,
                opts.confirm_repeats,
                opts.confirm_samples,
                opts.confirm_share,
                cold=opts.cold,
                storage_url=storage_url,
                run_id=run_id,
                plan=plan,
                started=started,
                pools=pools,
            )
        elif confirm:
            ui.warn("--confirm is not run for --num-nodes studies yet: the recommendation is the best single run")
    except KeyboardInterrupt:  # between two drains of the queue (a drain stores its own interruption)

        def store() -> str:
            plan.end("interrupted")
            return _resume(study, settings, storage_url, plan)

        raise Interrupted(after_interrupt(store, _resume_command(settings, storage_url, plan.trials, plan.flags))) from None
    except BaseException:
        plan.end("failed")  # a failed baseline, a lost database: this run adds nothing more (workers stop)
        raise
    finally:
        pools.close()
        shutil.rmtree(pools.log_dir, ignore_errors=True)
    plan.end("done")
    export_path = None
    try:
        recommended, baseline = recommendation(study, settings)
        if recommended is not None:
            export_path = Path(opts.out) if opts.out else default_export_path(storage_url, study_name)
            export_study(study, settings, recommended, baseline, export_path, storage_url)
            _save_note(study, settings, recommended, baseline, export_path, ui)
    except KeyboardInterrupt:  # every trial is stored: nothing to resume, the export can be written again
        out = f" --out {opts.out}" if opts.out else ""
        raise Interrupted(
            "",
            "after the search finished, while its config was exported; "
            f"autotune export {study_name} --storage {mask_url(storage_url)}{out} writes it",
        ) from None
    return SearchResult(study_name, storage_url, ran, recommended, baseline, export_path, study)


def _open_study(
    opts: SearchOptions, model_file: Path, study_name: str, storage_url: str, ui: UI
) -> tuple[Any, StudySettings, list[tuple[dict, dict]]]:
    """Resume the study, or create it (a new SQLite or journal file only after the model and the flags
    were checked, so bad input leaves nothing behind). Returns ``(study, settings, --enqueue seeds)``.

    Raises:
        UsageError: As :func:`_create_settings`, :func:`_check_resume` and :func:`_check_run_inputs`.
    """
    file = storage_file(storage_url)
    settings = seeds = None
    if file is not None and not file.exists():
        settings = _create_settings(opts, model_file, study_name, ui)
        seeds = _check_run_inputs(opts, settings, new_study=True)
    storage = open_storage(storage_url, heartbeat=True)
    if study_name in _study_names(storage):
        study = optuna.load_study(study_name=study_name, storage=storage)
        settings = settings_of(study)
        if settings is None:
            raise StudyMismatchError(f"study {study_name!r} in {mask_url(storage_url)} was not made by autotune; give another --study-name")
        completed = any(t.state == optuna.trial.TrialState.COMPLETE for t in study.get_trials(deepcopy=False))
        _check_resume(settings, opts, model_file, correctable=not completed)
        if study.user_attrs.get(BASELINE_ATTR) is None:
            # no baseline yet (it failed): the model or its config may have been fixed, so look again
            settings = _create_settings(_with_study_values(opts, settings), model_file, study_name, ui)
            study.set_user_attr(SETTINGS_ATTR, settings.to_dict())
        elif (changed := config_changed_line(settings)) is not None:
            ui.warn(changed)
        if opts.trial_timeout is not None:
            settings = settings.replace(trial_timeout=opts.trial_timeout)
        seeds = _check_run_inputs(opts, settings)
        n = len(study.get_trials(deepcopy=False))
        ui.info(f"resuming study {study_name!r} ({n} trial{'' if n == 1 else 's'} so far) in {mask_url(storage_url)}")
        return study, settings, seeds
    if settings is None:
        settings = _create_settings(opts, model_file, study_name, ui)
        seeds = _check_run_inputs(opts, settings, new_study=True)  # before the study exists: bad input leaves nothing behind
    try:
        # directions() gives "minimize"/"maximize" typed list[str]; Optuna's stub wants the Literal
        study = optuna.create_study(
            study_name=study_name,
            storage=storage,
            directions=directions(settings.objective, settings.mode),  # type: ignore[arg-type]
        )
    except optuna.exceptions.DuplicatedStudyError:  # another process created it meanwhile: join it
        study = optuna.load_study(study_name=study_name, storage=storage)
    study.set_user_attr(SETTINGS_ATTR, settings.to_dict())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names(
            _METRIC_NAMES.get(settings.objective, ["samples_per_sec"])
            if settings.objective != "pareto"
            else ["samples_per_sec", settings.monitor]
        )
    ui.info(f"created study {study_name!r} in {mask_url(storage_url)}")
    assert seeds is not None  # set with settings, by either _check_run_inputs above
    return study, settings, seeds


def _search_kind(settings: StudySettings, opts: SearchOptions, leader: Any) -> str:
    """``staged`` or ``flat``: ``--search``, else flat for a grid or a multi-node study, else the objective's default.

    Raises:
        UsageError: ``--search staged`` with an objective a short run does not measure.
    """
    search = opts.search or ("flat" if opts.sampler == "grid" or leader is not None else default_search(settings.objective))
    if search == "staged" and settings.objective not in ("throughput", "goodput"):
        raise UsageError(
            f"--search staged ranks stage 1 by samples/s, which does not decide --objective {settings.objective}; use --search flat"
        )
    return search


def _trials_this_run(study, settings: StudySettings, opts: SearchOptions, seeds: int, search: str) -> tuple[int, str | None]:
    """The trials this run adds: ``--trials``, or fewer when a discrete space has fewer configs that no
    trial ran (every trial counts against ``--trials``, one that trains nothing too: a duplicate, a
    predicted OOM). Returns ``(trials, the line that says why fewer, or None)``.

    A staged search also has the short screening runs of the system configs not screened yet. The
    baseline (a new study) and the ``--enqueue`` configs always run: the user asked for them.
    """
    add = opts.trials
    left = configs_left(study, settings.space)
    if left is None:
        return add, None
    size, run = left
    screen = screen_room(study, settings) if search == "staged" else 0
    forced = (1 if study.user_attrs.get(BASELINE_ATTR) is None and not _baseline_pending(study) else 0) + seeds
    room = max(size - run + screen, forced)
    if room >= add:
        return add, None
    if opts.sampler == "grid":
        return room, f"--sampler grid: {room} combination(s) of the space left to run; this run adds {room} trial(s), not {add}"
    screening = f" and {screen} system config(s) to screen with short runs" if screen else ""
    return room, (
        f"the space has {size} distinct config(s), {run} of them run already{screening}: this run adds {room} of the {add} "
        "trial(s) asked (a wider space searches more: --space, docs/search-spaces.md)"
    )


def _search(
    study,
    settings: StudySettings,
    opts: SearchOptions,
    seeds: list,
    leader: Any,
    storage_url: str,
    run_id: str,
    ui: UI,
    search: str,
    add: int,
    plan: _Plan,
    pools: Any,
) -> int:
    """Run this search's ``add`` trials (:func:`_trials_this_run`), ``staged`` or ``flat``, recording
    in ``plan`` what it has still to add, from the run's warm processes ``pools``. Returns the trials
    this process ran."""
    drain = _drain(study, settings, opts, leader, storage_url, run_id, ui, plan, pools)
    if search == "staged":
        left = configs_left(study, settings.space)
        full_room = None if left is None else left[0] - left[1]
        return _staged_search(study, settings, ui, drain, add, seeds, full_room=full_room, plan=plan)
    plan.hold(seeds, add)
    return drain(add=add, seeds=seeds)


def _drain(
    study, settings: StudySettings, opts: SearchOptions, leader: Any, storage_url: str, run_id: str, ui: UI, plan: _Plan, pools: Any
):
    """:func:`drain_queue` with this search run's arguments and warm processes (``add`` and ``seeds`` left to give)."""
    return functools.partial(
        drain_queue,
        study,
        settings,
        ui,
        jobs=opts.jobs,
        cold=opts.cold,
        storage_url=storage_url,
        leader=leader,
        pruner=(opts.pruner or _env_pruner(), opts.pruner_startup),
        run_id=run_id,
        plan=plan,
        pools=pools,
    )


def _waiting(study) -> int:
    """The study's queued (WAITING) trials."""
    return sum(t.state == optuna.trial.TrialState.WAITING for t in study.get_trials(deepcopy=False))


def _continue(
    study,
    settings: StudySettings,
    opts: SearchOptions,
    leader: Any,
    storage_url: str,
    run_id: str,
    ui: UI,
    stopped: Sequence[dict[str, Any]],
    plan: _Plan,
    pools: Any,
) -> int:
    """Finish the search runs in ``stopped`` (:func:`autotune.study.plan.stopped_runs`), each in its own
    search mode: its queued trials and held-back ones first (a staged run: the rest of stage 1), then
    its stage-2 runs. This run adds no trials of its own. Returns the trials this process ran."""
    for old in stopped:
        _take_over(study, old, run_id)
    drain = _drain(study, settings, opts, leader, storage_url, run_id, ui, plan, pools)
    ran = 0
    for old in stopped:
        plan.search, plan.trials = str(old.get("search", "flat")), int(old.get("trials") or opts.trials)
        seeds = [(dict(params), dict(attrs)) for params, attrs in old.get("seeds", [])]
        held, full = int(old.get("held", 0)), int(old.get("full", 0))
        plan.full = full
        plan.hold(seeds, held)
        if plan.search == "staged":
            ran += _stages(study, settings, ui, drain, held, seeds, full, plan)
        else:
            ran += drain(add=held, seeds=seeds)
    return ran


def busy_cores_line(settings: StudySettings, jobs: int, ui: UI) -> None:
    """Say so when this run's trials leave out cores other work keeps busy (:func:`autotune.jobs.plan_slots`)."""
    slot = machine_slots(Hardware.from_dict(settings.hardware), int(settings.devices), jobs)[0]
    if jobs == 1 and "AUTOTUNE_CPUS" in slot.env and "busy with other work" in slot.description:
        n = len(slot.env["AUTOTUNE_CPUS"].split(","))
        threads = max(1, n // int(settings.devices))
        ui.warn(
            f"busy host: trials run on {slot.description.removeprefix('one job: ')}, with {threads} torch thread(s) a device, "
            "so that a busy core does not stall every step; their samples/s are this machine's without the busy core(s)"
        )


def _check_run_inputs(opts: SearchOptions, settings: StudySettings, new_study: bool = False) -> list[tuple[dict, dict]]:
    """Check what needs the study's settings (``--sampler grid``, ``--enqueue``, ``--jobs`` with the
    study's devices) before the study is created or changed. Returns the ``--enqueue`` seeds.

    Raises:
        UsageError: As :func:`autotune.samplers.make_sampler`, :func:`autotune.jobs.machine_slots`
            and :func:`_seeds`.
    """

    machine_slots(Hardware.from_dict(settings.hardware), int(settings.devices), opts.jobs)
    make_sampler(opts.sampler or "tpe", settings.space, int(settings.seed))
    seeds = _seeds(opts.enqueue or [], settings)
    if new_study and len(seeds) > opts.trials - 1:
        raise UsageError(
            f"--enqueue gives {len(seeds)} config(s), but --trials {opts.trials} leaves room for {opts.trials - 1} "
            "after the baseline; raise --trials"
        )
    return seeds


def _seeds(files: Sequence[str], settings: StudySettings) -> list[tuple[dict, dict]]:
    """``(params, {"seeded_from": file})`` of each ``--enqueue`` file (a LightningCLI YAML, such as an export).

    Raises:
        UsageError: A missing or unreadable file, not YAML, not a LightningCLI config, or a value
            outside the study's space.
    """

    baseline = TrialConfig.from_dict(settings.baseline_config)
    seeds = []
    for file in files:
        path = Path(file)
        if not path.is_file():
            raise UsageError(f"--enqueue {file!r} does not exist; give a LightningCLI YAML such as an autotune export")
        try:
            document = yaml.safe_load(path.read_text())
        except yaml.YAMLError as e:
            raise UsageError(f"--enqueue {file!r} is not valid YAML ({getattr(e, 'problem', e)})") from None
        config = config_from_lightning_cli(document, settings.targets, baseline, source=file, searched=settings.space)
        seeds.append((params_of(config, settings.space, baseline, source=file), {"seeded_from": str(path)}))
    return seeds


def _search_node(num_nodes: int, node_rank: int | None, node_group: str | None):
    """The node identity of ``autotune search``, which must be node rank 0.

    Raises:
        UsageError: A node rank outside ``[0, num_nodes)``, or other than 0.
    """

    identity = node_identity(num_nodes, node_rank, node_group)
    if identity.node_rank != 0:
        raise UsageError(
            f"autotune search runs node rank 0 of a {num_nodes}-node trial, but this node's rank is {identity.node_rank}; "
            "run `autotune worker --node-rank K` on the other nodes (or unset NODE_RANK / give --node-rank 0)"
        )
    return identity


def _leader(study, settings: StudySettings, node_rank: int | None, node_group: str | None, command: str, ui: UI):
    """The :class:`autotune.nodes.LeaderChannel` of a multi-node study's node-0 process, else ``None``.

    Raises:
        UsageError: ``command`` is ``autotune search`` on a node rank other than 0.
    """

    num_nodes = settings.num_nodes
    if num_nodes == 1:
        return None
    identity = (
        _search_node(num_nodes, node_rank, node_group) if command == "autotune search" else node_identity(num_nodes, node_rank, node_group)
    )
    if identity.node_rank != 0:
        return identity
    ui.info(
        f"multi-node trials: this is node 0 of group {identity.group!r} at {identity.master_addr}; "
        f"start `autotune worker --node-rank K --node-group {identity.group}` on {num_nodes - 1} other node(s)"
    )
    return LeaderChannel(study, identity, num_nodes)
