#!/bin/bash
#SBATCH --array=0-9
#SBATCH --dependency=aftercorr:777
#SBATCH --output=post_%A_%a.out
#SBATCH --time=10
#SBATCH --mem-per-cpu=1G
#SBATCH --cpus-per-task=2
python post.py
