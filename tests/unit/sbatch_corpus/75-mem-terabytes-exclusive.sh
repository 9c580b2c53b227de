#!/bin/bash
#SBATCH --mem=2T
#SBATCH --exclusive
#SBATCH --nodes=1
#SBATCH --ntasks=64
#SBATCH --time=3-00:00:00
#SBATCH --partition=largemem
srun ./big
