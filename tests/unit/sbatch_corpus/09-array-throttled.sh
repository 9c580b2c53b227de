#!/bin/bash
#SBATCH --job-name=sweep
#SBATCH --array=0-99%10
#SBATCH --output=logs/sweep_%A_%a.out
#SBATCH --time=00:30:00
#SBATCH --mem=8G
#SBATCH --gres=gpu:1
#SBATCH -c 4

CONFIG=$(sed -n "$((SLURM_ARRAY_TASK_ID + 1))p" configs.txt)
python train.py $CONFIG
