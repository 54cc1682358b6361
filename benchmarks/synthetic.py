"""Grow an autotune study to N trials with copies of its own finished trials, in seconds.

Adding 10,000 trials through Optuna (``study.add_trial``) takes ~11 minutes on SQLite (one
transaction per trial, ~45 user attributes each). This copies rows inside the database instead:
each round duplicates the study's copied trials with ``INSERT ... SELECT`` on Optuna's own tables
(``optuna.storages._rdb.models``), with new trial ids and numbers, so the study doubles per round.
Only for benchmarks and tests: the copies are exact (every attribute, param and value), so what
reads them costs what it would cost on real trials.

Usage::

    python benchmarks/synthetic.py sqlite:///studies/big.db STUDY 10000
"""

from __future__ import annotations

import sys
import time

__all__ = ["grow"]


def grow(url: str, study_name: str, trials: int) -> int:
    """Add finished copies of the study's completed trials (not of its baseline) until it holds at least ``trials`` trials.

    Args:
        url: An SQLAlchemy URL of the study's RDB storage (SQLite or PostgreSQL).
        study_name: The study; it must hold at least one COMPLETE trial.
        trials: Trials wanted in all.

    Returns:
        The number of trials the study holds afterwards (``trials``, or more if it held more).

    Raises:
        ValueError: The study has no complete trial to copy besides its baseline.
    """
    import optuna
    import sqlalchemy as sa
    from optuna.storages._rdb import models

    storage = optuna.storages.RDBStorage(url)
    study_id = storage.get_study_id_from_name(study_name)
    engine = storage.engine
    T = models.TrialModel.__table__
    A = models.TrialUserAttributeModel.__table__
    children = [
        models.TrialParamModel.__table__,
        models.TrialValueModel.__table__,
        models.TrialUserAttributeModel.__table__,
        models.TrialSystemAttributeModel.__table__,
        models.TrialIntermediateValueModel.__table__,
    ]
    with engine.begin() as conn:
        count = conn.execute(sa.select(sa.func.count()).select_from(T).where(T.c.study_id == study_id)).scalar_one()
        source = [
            r[0]
            for r in conn.execute(
                sa.select(T.c.trial_id)
                .where(
                    T.c.study_id == study_id,
                    T.c.state == optuna.trial.TrialState.COMPLETE,
                    # the baseline stays one: its copies would each be marked as the baseline
                    ~T.c.trial_id.in_(sa.select(A.c.trial_id).where(A.c.key == "baseline", A.c.value_json == "true")),
                )
                .order_by(T.c.trial_id)
            )
        ]
    if not source:
        raise ValueError(f"study {study_name!r} has no complete trial to copy")
    while count < trials:
        with engine.begin() as conn:
            top_number = conn.execute(sa.select(sa.func.max(T.c.number)).where(T.c.study_id == study_id)).scalar_one()
            chosen = source[: trials - count]
            if engine.dialect.name == "postgresql":
                # ids from the table's own sequence: other processes may insert trials meanwhile
                ids = list(
                    conn.execute(
                        sa.text(f"SELECT nextval(pg_get_serial_sequence('trials', 'trial_id')) FROM generate_series(1, {len(chosen)})")
                    ).scalars()
                )
            else:  # SQLite: this transaction holds the database's write lock
                top_id = conn.execute(sa.select(sa.func.max(T.c.trial_id))).scalar_one()
                ids = [top_id + 1 + i for i in range(len(chosen))]
            # new numbers follow the study's existing ones in the order of the copied trials
            mapping = {old: (ids[i], top_number + 1 + i) for i, old in enumerate(chosen)}
            rows = conn.execute(
                sa.select(T.c.trial_id, T.c.state, T.c.datetime_start, T.c.datetime_complete).where(T.c.trial_id.in_(chosen))
            ).all()
            conn.execute(
                T.insert(),
                [
                    {
                        "trial_id": mapping[r[0]][0],
                        "number": mapping[r[0]][1],
                        "study_id": study_id,
                        "state": r[1],
                        "datetime_start": r[2],
                        "datetime_complete": r[3],
                    }
                    for r in rows
                ],
            )
            for table in children:
                keep = [c for c in table.c if not c.primary_key]
                found = conn.execute(sa.select(*keep).where(table.c.trial_id.in_(chosen))).all()
                if found:
                    names = [c.name for c in keep]
                    conn.execute(
                        table.insert(),
                        [dict(zip(names, (mapping[v][0] if n == "trial_id" else v for n, v in zip(names, r)))) for r in found],
                    )
        count += len(chosen)
        source = source + [mapping[old][0] for old in chosen]  # the copies are copied next round: doubling
    engine.dispose()
    return count


if __name__ == "__main__":
    started = time.perf_counter()
    n = grow(sys.argv[1], sys.argv[2], int(sys.argv[3]))
    print(f"{sys.argv[2]}: {n} trials ({time.perf_counter() - started:.1f} s)")
