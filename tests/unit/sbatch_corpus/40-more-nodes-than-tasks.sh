#!/bin/bash
#SBATCH --nodes=4
#SBATCH --ntasks=2
#SBATCH --time=60
srun ./app
