#!/bin/bash

#SBATCH -p volta-gpu
#SBATCH --qos gpu_access
#SBATCH --gres=gpu:1
#SBATCH -N 1
#SBATCH -n 1
#SBATCH --mem=20g
#SBATCH -t 1-
#SBATCH --mail-type=FAIL --mail-user=me@example.edu

python3 job.py
