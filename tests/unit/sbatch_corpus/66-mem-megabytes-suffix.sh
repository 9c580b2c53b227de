#!/bin/bash
#SBATCH --mem=32000MB
#SBATCH --time=7-0
#SBATCH -p bigmem
./assemble
