#!/bin/bash
#SBATCH --time=10
#SBATCH --job-name=early
module load cuda/12.2
#SBATCH --gres=gpu:4
#SBATCH --partition=gpu
nvidia-smi
