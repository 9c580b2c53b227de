#!/bin/bash
#SBATCH --time=2h
#SBATCH --gres=gpu:1
python train.py
