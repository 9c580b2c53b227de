#!/bin/bash
#SBATCH --job-name="unterminated
#SBATCH --time=10
python train.py
