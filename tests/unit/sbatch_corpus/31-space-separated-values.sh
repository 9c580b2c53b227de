#!/bin/bash
#SBATCH --partition gpu
#SBATCH --time 1:00:00
#SBATCH -n 4
#SBATCH --job-name test_space
#SBATCH --gres gpu:2
#SBATCH --mem 12000
srun ./a.out
