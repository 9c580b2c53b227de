#!/bin/bash
#SBATCH --gpus=a100:8
#SBATCH -N 2
#SBATCH --time=10:00:00
#SBATCH --job-name=llama-ft
srun python finetune.py
