#!/bin/bash
#SBATCH --job-name=disabled
##SBATCH --gres=gpu:2
# SBATCH --time=600
#sbatch --partition=gpu
#SBATCH --time=60
python train.py
