#!/bin/bash
#SBATCH --time=1:30
#SBATCH --partition=short
./quick_test
