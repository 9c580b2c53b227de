#!/bin/bash
#SBATCH --job-name=het
#SBATCH --nodes=1 --ntasks=1 --cpus-per-task=16 --time=60
#SBATCH hetjob
#SBATCH --nodes=2 --gres=gpu:4 --ntasks-per-node=4
srun --het-group=0 ./server : --het-group=1 ./workers
