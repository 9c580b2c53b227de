#!/bin/bash
#SBATCH --nodes=2
#SBATCH --gpus-per-node=4
#SBATCH --gpus-per-task=1
#SBATCH --ntasks-per-node=4
#SBATCH --time=2:00:00
srun ./app
