#!/bin/bash
#SBATCH -a 1-20:2
#SBATCH -t 10
echo "task $SLURM_ARRAY_TASK_ID"
