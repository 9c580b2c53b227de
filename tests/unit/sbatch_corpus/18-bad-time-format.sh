#!/bin/bash
#SBATCH --job-name=badtime
#SBATCH --time=1:00:00:00
python train.py
