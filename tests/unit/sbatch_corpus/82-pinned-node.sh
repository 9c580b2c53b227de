#!/bin/bash
#SBATCH --nodes=1
#SBATCH -w gpu-node-05
#SBATCH --gres=gpu:8
#SBATCH --exclusive
#SBATCH --time=1:00:00
./nccl-tests/build/all_reduce_perf -b 8 -e 8G -f 2 -g 8
