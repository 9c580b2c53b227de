#!/bin/bash
#SBATCH --account=def-someprof
#SBATCH --gres=gpu:a100:4        # request 4 A100s on one node
#SBATCH --cpus-per-task=48       # all the node's cores
#SBATCH --mem=498G               # all the node's memory
#SBATCH --time=0-12:00           # DD-HH:MM
#SBATCH --output=%N-%j.out       # %N: the node's name
module load python/3.11 cuda
source ~/env/bin/activate
python train.py
