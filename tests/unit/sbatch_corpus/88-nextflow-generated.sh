#!/bin/bash -ue
#SBATCH -J nf-ALIGN_(sample_7)
#SBATCH -o /work/aa/12345/.command.log
#SBATCH --no-requeue
#SBATCH --signal B:USR2@30
#SBATCH -c 16
#SBATCH -t 360
#SBATCH --mem 65536M
#SBATCH -p standard
# NEXTFLOW TASK: ALIGN (sample_7)
set -e
bash .command.run
