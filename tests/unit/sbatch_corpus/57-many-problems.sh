#!/bin/bash
#SBATCH --time=tomorrow
#SBATCH --mem=lots
#SBATCH --gpus-per-nod=2
python train.py
