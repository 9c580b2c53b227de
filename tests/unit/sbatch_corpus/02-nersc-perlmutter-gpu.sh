#!/bin/bash
#SBATCH -A m9999_g
#SBATCH -C gpu
#SBATCH -q regular
#SBATCH -t 1:30:00
#SBATCH -N 2
#SBATCH --ntasks-per-node=4
#SBATCH -c 32
#SBATCH --gpus-per-node=4
#SBATCH --gpu-bind=none

export SLURM_CPU_BIND="cores"
srun ./vecadd_gpu
