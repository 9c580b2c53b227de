#!/bin/bash
#SBATCH -o run.log -e run.err
#SBATCH --open-mode=append --time=45
#SBATCH -N 1 --ntasks-per-node 4
srun ./a.out
