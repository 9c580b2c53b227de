#!/bin/bash
#SBATCH --time=0
./serve
