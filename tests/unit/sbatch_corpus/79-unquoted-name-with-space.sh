#!/bin/bash
#SBATCH --job-name=my training run
#SBATCH --time=10
python train.py
