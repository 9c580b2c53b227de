#!/bin/bash
#SBATCH --nodes=2-4
#SBATCH --time=60
#SBATCH --partition=elastic
srun ./app
