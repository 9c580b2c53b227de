#!/bin/bash
#SBATCH --job-name=het-bad
#SBATCH --nodes=1 --cpus-per-task=8 --time=30
#SBATCH hetjob
#SBATCH --nodes=2 --gres=gpu:4 --mem=1.5G
srun --het-group=0 ./coordinator : --het-group=1 ./workers
