#!/bin/bash
#SBATCH -w node[01-04]
#SBATCH --time=60
srun hostname
