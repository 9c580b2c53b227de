#!/bin/bash
#SBATCH -G 1
#SBATCH -c 8
#SBATCH --mem 32G
#SBATCH -t 04:00:00
#SBATCH -p gpu
#SBATCH -J llm-eval
python eval.py --model llama
