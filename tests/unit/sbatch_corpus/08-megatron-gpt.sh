#!/bin/bash
#SBATCH -A llm_research
#SBATCH -p batch
#SBATCH -N 16
#SBATCH -t 4:00:00
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --exclusive
#SBATCH --mem=0
#SBATCH --overcommit
#SBATCH --dependency=singleton
#SBATCH -J megatron-gpt3-175b

DIR=$(pwd)
srun -l --container-image nvcr.io/nvidia/pytorch:24.01-py3 --container-mounts "$DIR:$DIR" \
    python pretrain_gpt.py --tensor-model-parallel-size 8 --pipeline-model-parallel-size 16
