#!/bin/bash
#SBATCH --dependency=afterok:$PREV_JOB
#SBATCH --time=10
./job
