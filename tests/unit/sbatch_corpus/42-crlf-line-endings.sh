#!/bin/bash
#SBATCH --job-name=from-windows
#SBATCH --time=10

python train.py
