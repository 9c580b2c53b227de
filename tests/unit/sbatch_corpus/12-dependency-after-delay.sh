#!/bin/bash
#SBATCH -d afterany:5001,after:5002+10
#SBATCH -t 5
./report.sh
