#!/bin/bash
#SBATCH --job-name=run\ 42
#SBATCH --comment="#1 priority run"
#SBATCH --output='logs/run 42.out'
#SBATCH --time=10
./job
