#!/bin/bash
#SBATCH --export=ALL,OMP_NUM_THREADS=4,DATA_DIR=/data
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=4
#SBATCH --time=00:20:00
./omp_app
