#!/bin/bash

# Parameters
#SBATCH --cpus-per-task=10
#SBATCH --error=/checkpoint/%u/jobs/%j_0_log.err
#SBATCH --gpus-per-node=8
#SBATCH --job-name=submitit
#SBATCH --mem=480GB
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --open-mode=append
#SBATCH --output=/checkpoint/%u/jobs/%j_0_log.out
#SBATCH --partition=learnfair
#SBATCH --signal=USR2@90
#SBATCH --time=4320
#SBATCH --wckey=submitit

# command
export SUBMITIT_EXECUTOR=slurm
srun --unbuffered --output /checkpoint/%u/jobs/%j_%t_log.out --error /checkpoint/%u/jobs/%j_%t_log.err python -u -m submitit.core._submit /checkpoint/%u/jobs
