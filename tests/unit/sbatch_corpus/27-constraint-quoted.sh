#!/bin/bash
#SBATCH --job-name="my job"
#SBATCH -C "a100&ib"
#SBATCH --hint=nomultithread
#SBATCH --exclusive
#SBATCH -N 1
#SBATCH --ntasks-per-node=4
#SBATCH --gres=gpu:a100:4
#SBATCH --time=3:00:00
srun ./app
