#!/bin/bash
#SBATCH --job-name=postprocess
#SBATCH --dependency=afterok:123:124
#SBATCH --kill-on-invalid-dep=yes
#SBATCH --time=15
python collect.py
