#SBATCH --time=10
#SBATCH --job-name=noshebang
python train.py
