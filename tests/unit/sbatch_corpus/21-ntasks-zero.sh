#!/bin/bash
#SBATCH --ntasks=0
#SBATCH --time=10
true
