#!/bin/bash
#SBATCH --time=10
./job
