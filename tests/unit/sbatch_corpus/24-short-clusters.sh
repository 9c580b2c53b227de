#!/bin/bash
#SBATCH -N2 -n4 -c2
#SBATCH -Jclustered
#SBATCH -t90
#SBATCH -HQ
#SBATCH -pdebug
srun hostname
