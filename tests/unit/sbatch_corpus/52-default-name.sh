#!/bin/bash
#SBATCH --ntasks=2
#SBATCH --time=3
srun hostname
