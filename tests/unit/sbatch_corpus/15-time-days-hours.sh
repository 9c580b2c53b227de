#!/bin/bash
#SBATCH --time=1-12
#SBATCH --time-min=1-0
#SBATCH --partition=long
./simulate
