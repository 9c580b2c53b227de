#!/bin/bash

# Resources
#SBATCH --ntasks=1

   # indented comment: parsing goes on
  #SBATCH --mem=1G
#SBATCH --time=20

#SBATCH --cpus-per-task=2
echo start
