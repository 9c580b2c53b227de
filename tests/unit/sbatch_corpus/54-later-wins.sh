#!/bin/bash
#SBATCH --time=1:00:00
#SBATCH --partition=debug
#SBATCH --time=2:00:00
#SBATCH -p gpu
python train.py
