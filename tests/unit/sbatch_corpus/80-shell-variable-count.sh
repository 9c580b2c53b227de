#!/bin/bash
#SBATCH --cpus-per-task=$NCPUS
#SBATCH --time=10
python train.py
