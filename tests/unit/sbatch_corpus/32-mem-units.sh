#!/bin/bash
#SBATCH --mem=16GB
#SBATCH --time=30
#SBATCH --tmp=100G
python prep.py
