#!/bin/bash
#SBATCH --partition=gpu
#SBATCH --qos=normal
#SBATCH --gres=gpu:1080ti:1
#SBATCH --mem=32G
#SBATCH -t 2-00:00:00
#SBATCH --job-name=yolo
#SBATCH --output=yolo_%j.log
python train_yolo.py
