#!/bin/bash
#SBATCH --exclusive=user
#SBATCH --nodes=1
#SBATCH --time=30
./bench
