#!/bin/bash
#SBATCH --time="00:00:30"
#SBATCH --mem=512K
./job
