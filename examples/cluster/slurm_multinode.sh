#!/bin/bash
# Trials that each span two nodes (Lightning num_nodes=2, 8 GPUs per node = 16 DDP ranks per trial).
# One `autotune` process per node: node 0 runs `autotune search` (it takes the trials and announces
# each one in the study); node 1 runs `autotune worker`, which joins every announced trial with
# NODE_RANK=1. Inside one srun step, SLURM_NODEID gives each process its node rank and SLURM_JOB_ID
# names the node group; autotune never passes SLURM's own rank variables on to the trials.
#
#   sbatch examples/cluster/slurm_multinode.sh
#
# Needs: a PostgreSQL server both nodes reach, the same checkout path on both, and node 1 able to
# reach node 0's host name on a free TCP port (torch.distributed's rendezvous).
#SBATCH --job-name=autotune-2node
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --time=04:00:00
set -euo pipefail

export AUTOTUNE_STORAGE="postgresql+psycopg://autotune@db-host:5432/autotune"   # no password in scripts: use ~/.pgpass
STUDY=digits-2node
MODEL=examples/digits/model.py

srun --nodes=2 --ntasks-per-node=1 bash -c '
  if [ "$SLURM_NODEID" = 0 ]; then
    exec autotune search '"$MODEL"' --study-name '"$STUDY"' --num-nodes 2 --devices 8 --trials 32
  else
    until autotune show '"$STUDY"' --format json >/dev/null 2>&1; do sleep 10; done
    exec autotune worker --study-name '"$STUDY"'
  fi'
