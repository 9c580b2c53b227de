#!/bin/bash
#SBATCH --array=1,3,5-7
#SBATCH --error=err/%A_%a.err
#SBATCH --time=5
python task.py $SLURM_ARRAY_TASK_ID
