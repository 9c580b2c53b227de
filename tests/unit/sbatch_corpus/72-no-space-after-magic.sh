#!/bin/bash
#SBATCH--time=5
#SBATCH  --job-name=tight
./job
