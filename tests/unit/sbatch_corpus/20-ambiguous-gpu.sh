#!/bin/bash
#SBATCH --gpu=1
#SBATCH --time=10
python train.py
