#!/bin/bash
#SBATCH --gpus-per-node=a100
#SBATCH --cpus-per-task=16
#SBATCH --time=3:00:00
python train.py
