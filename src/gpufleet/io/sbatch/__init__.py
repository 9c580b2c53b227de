"""Read an ``#SBATCH`` script as sbatch reads it, then map it onto gpufleet's JobSpec.

Two steps, kept apart:

1. :func:`read_request` (``read``) reads the script exactly as sbatch does (Slurm's
   ``src/sbatch/opt.c``): directives are the lines that start with ``#SBATCH`` (or ``#SLURM``)
   before the first command line; each is split into words as sbatch's ``get_argument`` splits
   them (``lex``: quotes group, a backslash escapes, an unquoted ``#`` ends the line); the words
   of all lines are read with sbatch's option table and getopt_long (:mod:`gpufleet.io.slurm_opts`),
   each value checked as sbatch checks it (``options``, with the value formats of
   :mod:`gpufleet.io.slurm_values`), and the counts worked out as sbatch's ``_opt_verify`` does
   (``verify``); command-line options come after and win. The result is a :class:`SlurmRequest`
   in Slurm's own terms (``request``). Every option sbatch accepts is accepted; only what sbatch
   refuses is refused, every problem at once.
2. :func:`parse_sbatch_text` (``script``) maps the request onto a JobSpec (``build`` for the
   workers and their resources, ``terms`` for the rest): with ``--nodes`` (or
   ``--ntasks-per-node``) one worker per node on distinct nodes, its tasks sharing the node's
   GPUs, CPUs and memory; with only ``--ntasks``, one worker per task (with GPUs per node
   too, the tasks in one worker on one node). What a JobSpec cannot express yet is refused
   here, at submit time, saying what gpufleet cannot do; options gpufleet does not act on get
   one warning each.
"""

from gpufleet.io.sbatch.lex import looks_like_sbatch, read_script, split_directive
from gpufleet.io.sbatch.options import DEFAULT_NO_EFFECT, HONOURED, NO_EFFECT
from gpufleet.io.sbatch.read import read_request
from gpufleet.io.sbatch.request import CANNOT, SbatchError, SbatchJob, SlurmRequest
from gpufleet.io.sbatch.script import C_INTERPRETERS, SHELLS, parse_sbatch, parse_sbatch_text
from gpufleet.io.slurm_opts import OPTIONS
from gpufleet.io.slurm_values import SUPPORTED_DEPENDENCY_TYPES as DEPENDENCY_TYPES
from gpufleet.io.slurm_values import parse_dependency, parse_memory, parse_time

OPTION_COUNT = len(OPTIONS)

__all__ = [
    "CANNOT",
    "C_INTERPRETERS",
    "DEFAULT_NO_EFFECT",
    "DEPENDENCY_TYPES",
    "HONOURED",
    "NO_EFFECT",
    "OPTION_COUNT",
    "SHELLS",
    "SbatchError",
    "SbatchJob",
    "SlurmRequest",
    "looks_like_sbatch",
    "parse_dependency",
    "parse_memory",
    "parse_sbatch",
    "parse_sbatch_text",
    "parse_time",
    "read_request",
    "read_script",
    "split_directive",
]
