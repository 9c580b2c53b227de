#!/bin/bash
#SBATCH --memory=16G
#SBATCH --time=10
python train.py
