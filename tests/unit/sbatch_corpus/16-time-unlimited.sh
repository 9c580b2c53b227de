#!/bin/bash
#SBATCH --time=UNLIMITED
#SBATCH --partition=infinite
./serve
