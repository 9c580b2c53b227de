#!/bin/bash
#SBATCH --time=10 minutes
python train.py
