"""``gpufleet plan``: size nodes, fabric, storage, racks and power for a GPU cluster.

Pure computation over the GPU catalog and the formulas stated in each module: ``intent`` reads
and validates the spec, ``storage``, ``node``, ``fabric`` and ``power`` each plan one part,
``bom`` counts the parts, ``cluster_yaml`` and ``slurm`` export the result, ``report`` renders it
for people and scripts, and ``build`` runs them in order.
"""

from gpufleet.ops.plan.build import Plan, make_plan, plan_from_data
from gpufleet.ops.plan.intent import PlanSpec, read_plan_spec

__all__ = ["Plan", "PlanSpec", "make_plan", "plan_from_data", "read_plan_spec"]
