#!/bin/bash
#SBATCH --gres=gpu
#SBATCH --partition=gpu-shared
#SBATCH --time=1:00:00
python train.py
