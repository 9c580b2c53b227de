#!/bin/bash
#SBATCH	--time=10	# ten minutes
#SBATCH --output logs/out.%j   # space-separated value
#SBATCH	-n	2
#SBATCH --partition=cpu		# tabs before the comment

srun ./mpi_hello
