#!/bin/bash
#SBATCH --cpus-per=4
#SBATCH --time=10
python train.py
