#!/bin/bash
#SBATCH --nodes=1
#SBATCH --nodelist=gpu[01-02]
#SBATCH --gres=gpu:8
#SBATCH --time=1:00:00
srun ./bench
