#!/bin/bash
#SBATCH --mem=1.5G
#SBATCH --time=30
python prep.py
