#!/bin/bash
#SBATCH --gpus-per-node=v100:2
#SBATCH --cpus-per-gpu=8
#SBATCH --mem-per-gpu=40G
#SBATCH --time=08:00:00
#SBATCH --account=proj42
python -m torch.distributed.run --nproc_per_node=2 train.py
