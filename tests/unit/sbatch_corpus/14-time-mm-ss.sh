#!/bin/bash
#SBATCH --time=5:30
hostname
