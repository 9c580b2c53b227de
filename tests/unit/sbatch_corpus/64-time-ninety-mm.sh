#!/bin/bash
#SBATCH --time=90:00
#SBATCH --mem=16g
./job
