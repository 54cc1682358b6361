#!/bin/bash
# One autotune study over several nodes under SLURM: the first node creates the study and queues the
# budget (and runs trials itself); every other node joins it with `autotune worker`. The budget
# lives in PostgreSQL as Optuna's trial queue, so each queued trial runs exactly once.
#
#   sbatch examples/cluster/slurm.sh
#
# Needs: a PostgreSQL server every node reaches, the same checkout path on every node (the study
# records the model file's absolute path), and `pip install -e ".[postgres]"`.
#SBATCH --job-name=autotune
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --time=04:00:00
set -euo pipefail

export AUTOTUNE_STORAGE="postgresql+psycopg://autotune@db-host:5432/autotune"   # no password in scripts: use ~/.pgpass
STUDY=digits-cluster
MODEL=examples/digits/model.py

# node 0: create the study (inspects the model, runs the baseline) and queue 64 trials, 8 at once (one per GPU)
srun --nodes=1 --ntasks=1 --exclusive autotune search "$MODEL" --study-name "$STUDY" --trials 64 --jobs 8 &

# the other nodes: wait until the study exists, then take trials from its queue until it is empty
until autotune show "$STUDY" --format json >/dev/null 2>&1; do sleep 10; done
srun --nodes=$((SLURM_NNODES - 1)) --ntasks-per-node=1 --exclusive autotune worker --study-name "$STUDY" --jobs 8
wait

autotune export "$STUDY" --out "studies/$STUDY.best.yaml"
