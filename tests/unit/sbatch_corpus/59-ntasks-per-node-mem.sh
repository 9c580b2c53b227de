#!/bin/bash
#SBATCH --nodes=3
#SBATCH --ntasks-per-node=2
#SBATCH --ntasks=6
#SBATCH --mem=64G
#SBATCH --time=12:00:00
#SBATCH --partition=compute
#SBATCH --output=slurm_output/%x_%j.out
#SBATCH --error=slurm_output/%x_%j.err
srun ./lammps -in in.lj
