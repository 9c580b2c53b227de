#!/bin/bash
#SBATCH --nodes=2-4
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=1
#SBATCH --time=1:00:00
srun ./elastic_train
