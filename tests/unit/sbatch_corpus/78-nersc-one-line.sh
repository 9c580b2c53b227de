#!/bin/bash
#SBATCH -N 1 -n 1 -c 8 --mem=8G -t 00:10:00 -J oneliner -o oneliner.%j.out -e oneliner.%j.err -q debug -C cpu --oom-kill-step
srun ./app
