#!/bin/bash
# Tasks with GPUs and memory per node and no --nodes: Slurm chooses the node count
#SBATCH --ntasks 4
#SBATCH --gres gpu:1
#SBATCH --mem 16G
srun python train.py
