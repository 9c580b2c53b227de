#!/bin/bash
#SBATCH --gpus=8
#SBATCH --ntasks=8
#SBATCH --ntasks-per-gpu=1
#SBATCH --cpus-per-gpu=6
#SBATCH --time=01:00:00
srun python infer.py
