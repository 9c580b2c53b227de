#!/bin/bash
#SBATCH --nice 5
#SBATCH --time=10
python train.py
