#!/bin/bash
#SBATCH --ntasks=4
#SBATCH --gpus-per-task=1
#SBATCH --cpus-per-task=10
#SBATCH --mem-per-cpu=3800M
#SBATCH --time=6:00:00
#SBATCH --gpu-bind=single:1
srun python train.py
