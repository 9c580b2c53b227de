#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per=4
true
