#!/bin/bash
#SBATCH --job=abbrev
#SBATCH -N 2
#SBATCH --ntasks-per-n=2
#SBATCH --cpus-per-t=8
#SBATCH --mem-per-c=2G
#SBATCH --part=gpu
#SBATCH --gpus-per-n=2
#SBATCH --dep=afterok:42
srun ./app
