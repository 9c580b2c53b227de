#!/bin/bash
#SBATCH --gres=gpu:1g.10gb:1
#SBATCH --time=00:45:00
#SBATCH --mem-per-cpu=8G
#SBATCH --cpus-per-task=2
python notebook_job.py
