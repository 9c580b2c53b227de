#!/bin/bash
#SBATCH --mem=8G
#SBATCH --mem-per-cpu=2G
#SBATCH --time=30
python prep.py
