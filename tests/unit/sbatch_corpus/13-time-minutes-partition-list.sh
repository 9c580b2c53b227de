#!/bin/bash
#SBATCH -t 90
#SBATCH -p gpu,gpu-long
#SBATCH --gres=gpu:2
python eval.py
