#!/bin/bash
#SBATCH -J=myname
#SBATCH -t 30
./job
