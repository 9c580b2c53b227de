#!/bin/bash
#SBATCH --partition=gpu # was --time=5, now the default
#SBATCH --gres=gpu:1#--gres=gpu:2 for the big model
python train.py
