#!/bin/bash
#SBATCH --account=def-someprof
#SBATCH --ntasks=4               # number of MPI processes
#SBATCH --mem-per-cpu=4000       # memory; default unit is megabytes
#SBATCH --time=0-03:00           # time (DD-HH:MM)
srun ./mpi_program               # mpirun or mpiexec also work
