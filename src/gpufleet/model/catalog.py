"""The GPU catalog: the datasheet figures that planning and placement need.

Figures are dense (no sparsity) peak numbers from each vendor's datasheet; ``source`` names it.
Datasheets quote tensor throughput "with sparsity"; the figures here are half of those.

name       mem GB  GB/s   FP64   FP32   BF16  TDP W  link GB/s  form  note
B200          180  8000     37     75   2250   1000       1800  SXM   per GPU of an HGX B200
H200          141  4800     34     67    989    700        900  SXM
H100-SXM       80  3350     34     67    989    700        900  SXM
H100-PCIe      80  2000     26     51    756    350        600  PCIe  NVLink bridge
H800           80  3350      1     67    989    700        400  SXM   export part
A100-40GB      40  1555    9.7   19.5    312    400        600  SXM
A100-80GB      80  2039    9.7   19.5    312    400        600  SXM
A800           80  2039    9.7   19.5    312    400        400  SXM   export part
L40S           48   864   1.4*   91.6    362    350          0  PCIe
L40            48   864   1.4*   90.5    181    300          0  PCIe
RTX-6000-Ada   48   960   1.4*   91.1    181    300          0  PCIe
L4             24   300  0.47*   30.3    121     72          0  PCIe
A16            16   200  0.07*    4.5   17.9     62          0  PCIe  per GPU of a 4-GPU board
A10            24   600  0.49*   31.2    125    150          0  PCIe
T4             16   320  0.25*    8.1    65+     70          0  PCIe
V100-16GB      16   900    7.8   15.7   125+    300        300  SXM   SXM2
V100-32GB      32   900    7.8   15.7   125+    300        300  SXM   SXM2
P100           16   732    4.7    9.3  18.7+    250          0  PCIe  16 GB PCIe card
RTX-A6000      48   768   0.6*   38.7    155    300      112.5  PCIe  2-way NVLink bridge
RTX-4090       24  1008   1.3*   82.6    165    450          0  PCIe  FP32 accumulate
MI300X        192  5300   81.7  163.4   1307    750        896  OAM   Infinity Fabric

``*`` FP64 is not on the datasheet: the architecture's rate (1/64 of FP32 for GA10x/AD10x, 1/32
for Turing). ``+`` the part has no BF16: the figure is dense FP16 tensor (P100: packed FP16, no
tensor cores). Alibaba's openb trace names "V100M16", "V100M32", "P100", "T4" and "A10" are
aliases; its "G2" and "G3" are anonymized and have no entry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import lru_cache

from gpufleet.model.errors import SpecError


@dataclass(frozen=True, slots=True)
class GpuModel:
    name: str  # canonical, e.g. "H100-SXM"
    vendor: str
    memory_gib: float
    memory_bandwidth_gbs: float  # GB/s
    fp64_tflops: float
    fp32_tflops: float
    bf16_tflops: float  # dense tensor-core BF16 (FP16 where the part has no BF16)
    tdp_w: int
    nvlink_gbs: float  # total bidirectional GPU-to-GPU bandwidth, 0 when none
    form_factor: str  # "SXM", "PCIe", "OAM"
    source: str
    aliases: tuple[str, ...] = ()


GPU_MODELS: tuple[GpuModel, ...] = (
    # Per GPU: the 8-GPU HGX B200 board's figures divided by 8 (1.44 TB, 64 TB/s, 14.4 TB/s).
    GpuModel(
        name="B200",
        vendor="NVIDIA",
        memory_gib=180,
        memory_bandwidth_gbs=8000,
        fp64_tflops=37,
        fp32_tflops=75,
        bf16_tflops=2250,
        tdp_w=1000,
        nvlink_gbs=1800,
        form_factor="SXM",
        source="NVIDIA HGX B200 / DGX B200 datasheet (2024)",
        aliases=("B200-SXM", "HGX-B200"),
    ),
    GpuModel(
        name="H200",
        vendor="NVIDIA",
        memory_gib=141,
        memory_bandwidth_gbs=4800,
        fp64_tflops=34,
        fp32_tflops=67,
        bf16_tflops=989,
        tdp_w=700,
        nvlink_gbs=900,
        form_factor="SXM",
        source="NVIDIA H200 Tensor Core GPU datasheet (2024), H200 SXM",
        aliases=("H200-SXM", "H200-141GB"),
    ),
    GpuModel(
        name="H100-SXM",
        vendor="NVIDIA",
        memory_gib=80,
        memory_bandwidth_gbs=3350,
        fp64_tflops=34,
        fp32_tflops=67,
        bf16_tflops=989,
        tdp_w=700,
        nvlink_gbs=900,
        form_factor="SXM",
        source="NVIDIA H100 Tensor Core GPU datasheet (2022), H100 SXM",
        aliases=("H100", "H100-SXM5", "H100-80GB"),
    ),
    GpuModel(
        name="H100-PCIe",
        vendor="NVIDIA",
        memory_gib=80,
        memory_bandwidth_gbs=2000,
        fp64_tflops=26,
        fp32_tflops=51,
        bf16_tflops=756,
        tdp_w=350,
        nvlink_gbs=600,  # with the NVLink bridge
        form_factor="PCIe",
        source="NVIDIA H100 Tensor Core GPU datasheet (2022), H100 PCIe",
        aliases=("H100PCIE", "H100-PCIE-80GB"),
    ),
    GpuModel(
        name="H800",
        vendor="NVIDIA",
        memory_gib=80,
        memory_bandwidth_gbs=3350,
        fp64_tflops=1,
        fp32_tflops=67,
        bf16_tflops=989,
        tdp_w=700,
        nvlink_gbs=400,
        form_factor="SXM",
        source="NVIDIA H800 Tensor Core GPU datasheet (2023), H800 SXM",
        aliases=("H800-SXM", "H800-80GB"),
    ),
    GpuModel(
        name="A100-40GB",
        vendor="NVIDIA",
        memory_gib=40,
        memory_bandwidth_gbs=1555,
        fp64_tflops=9.7,
        fp32_tflops=19.5,
        bf16_tflops=312,
        tdp_w=400,
        nvlink_gbs=600,
        form_factor="SXM",
        source="NVIDIA A100 Tensor Core GPU datasheet (2021), A100 40GB SXM",
        aliases=("A100-SXM4-40GB", "A100-40G"),
    ),
    GpuModel(
        name="A100-80GB",
        vendor="NVIDIA",
        memory_gib=80,
        memory_bandwidth_gbs=2039,
        fp64_tflops=9.7,
        fp32_tflops=19.5,
        bf16_tflops=312,
        tdp_w=400,
        nvlink_gbs=600,
        form_factor="SXM",
        source="NVIDIA A100 Tensor Core GPU datasheet (2021), A100 80GB SXM",
        aliases=("A100", "A100-SXM4-80GB", "A100-80G"),
    ),
    GpuModel(
        name="A800",
        vendor="NVIDIA",
        memory_gib=80,
        memory_bandwidth_gbs=2039,
        fp64_tflops=9.7,
        fp32_tflops=19.5,
        bf16_tflops=312,
        tdp_w=400,
        nvlink_gbs=400,
        form_factor="SXM",
        source="NVIDIA A800 Tensor Core GPU datasheet (2022), A800 80GB SXM",
        aliases=("A800-80GB", "A800-SXM4-80GB"),
    ),
    GpuModel(
        name="L40S",
        vendor="NVIDIA",
        memory_gib=48,
        memory_bandwidth_gbs=864,
        fp64_tflops=1.4,  # not on the datasheet: 1/64 of FP32 (Ada)
        fp32_tflops=91.6,
        bf16_tflops=362,
        tdp_w=350,
        nvlink_gbs=0,
        form_factor="PCIe",
        source="NVIDIA L40S GPU datasheet (2023)",
    ),
    GpuModel(
        name="L40",
        vendor="NVIDIA",
        memory_gib=48,
        memory_bandwidth_gbs=864,
        fp64_tflops=1.4,  # not on the datasheet: 1/64 of FP32 (Ada)
        fp32_tflops=90.5,
        bf16_tflops=181,
        tdp_w=300,
        nvlink_gbs=0,
        form_factor="PCIe",
        source="NVIDIA L40 GPU datasheet (2022)",
    ),
    GpuModel(
        name="RTX-6000-Ada",
        vendor="NVIDIA",
        memory_gib=48,
        memory_bandwidth_gbs=960,
        fp64_tflops=1.4,  # not on the datasheet: 1/64 of FP32 (Ada)
        fp32_tflops=91.1,
        bf16_tflops=181,  # as the L40: the same AD102 with 142 SMs
        tdp_w=300,
        nvlink_gbs=0,
        form_factor="PCIe",
        source="NVIDIA RTX 6000 Ada Generation datasheet (2023)",
        aliases=("RTX6000ADA", "RTX-6000-ADA-GENERATION"),
    ),
    GpuModel(
        name="L4",
        vendor="NVIDIA",
        memory_gib=24,
        memory_bandwidth_gbs=300,
        fp64_tflops=0.47,  # not on the datasheet: 1/64 of FP32 (Ada)
        fp32_tflops=30.3,
        bf16_tflops=121,
        tdp_w=72,
        nvlink_gbs=0,
        form_factor="PCIe",
        source="NVIDIA L4 Tensor Core GPU datasheet (2023)",
    ),
    # Per GPU: the board carries four (64 GB, 4 x 200 GB/s, 250 W in all).
    GpuModel(
        name="A16",
        vendor="NVIDIA",
        memory_gib=16,
        memory_bandwidth_gbs=200,
        fp64_tflops=0.07,  # not on the datasheet: 1/64 of FP32 (GA107)
        fp32_tflops=4.5,
        bf16_tflops=17.9,  # the datasheet's 35.9 is with sparsity
        tdp_w=62,
        nvlink_gbs=0,
        form_factor="PCIe",
        source="NVIDIA A16 datasheet (2021), per GPU of the four on a board",
    ),
    GpuModel(
        name="A10",
        vendor="NVIDIA",
        memory_gib=24,
        memory_bandwidth_gbs=600,
        fp64_tflops=0.49,  # not on the datasheet: 1/64 of FP32 (GA102)
        fp32_tflops=31.2,
        bf16_tflops=125,
        tdp_w=150,
        nvlink_gbs=0,
        form_factor="PCIe",
        source="NVIDIA A10 Tensor Core GPU datasheet (2021)",
        aliases=("A10-24GB",),
    ),
    GpuModel(
        name="T4",
        vendor="NVIDIA",
        memory_gib=16,
        memory_bandwidth_gbs=320,
        fp64_tflops=0.25,  # not on the datasheet: 1/32 of FP32 (Turing)
        fp32_tflops=8.1,
        bf16_tflops=65,  # no BF16: dense FP16 mixed-precision tensor
        tdp_w=70,
        nvlink_gbs=0,
        form_factor="PCIe",
        source="NVIDIA T4 Tensor Core GPU datasheet (2019)",
        aliases=("T4-16GB", "TESLA-T4"),
    ),
    GpuModel(
        name="V100-16GB",
        vendor="NVIDIA",
        memory_gib=16,
        memory_bandwidth_gbs=900,
        fp64_tflops=7.8,
        fp32_tflops=15.7,
        bf16_tflops=125,  # no BF16: FP16 tensor
        tdp_w=300,
        nvlink_gbs=300,
        form_factor="SXM",
        source="NVIDIA Tesla V100 GPU datasheet (2020), V100 SXM2 16GB",
        aliases=("V100M16", "V100-SXM2-16GB"),
    ),
    GpuModel(
        name="V100-32GB",
        vendor="NVIDIA",
        memory_gib=32,
        memory_bandwidth_gbs=900,
        fp64_tflops=7.8,
        fp32_tflops=15.7,
        bf16_tflops=125,  # no BF16: FP16 tensor
        tdp_w=300,
        nvlink_gbs=300,
        form_factor="SXM",
        source="NVIDIA Tesla V100 GPU datasheet (2020), V100 SXM2 32GB",
        aliases=("V100", "V100M32", "V100-SXM2-32GB"),
    ),
    # The PCIe 16 GB card (as in Alibaba Cloud's gn5 instances), not the SXM2 module.
    GpuModel(
        name="P100",
        vendor="NVIDIA",
        memory_gib=16,
        memory_bandwidth_gbs=732,
        fp64_tflops=4.7,
        fp32_tflops=9.3,
        bf16_tflops=18.7,  # no BF16 and no tensor cores: packed FP16
        tdp_w=250,
        nvlink_gbs=0,
        form_factor="PCIe",
        source="NVIDIA Tesla P100 GPU accelerator datasheet (2016), P100 PCIe 16GB",
        aliases=("P100-16GB", "P100-PCIE-16GB", "TESLA-P100"),
    ),
    GpuModel(
        name="RTX-A6000",
        vendor="NVIDIA",
        memory_gib=48,
        memory_bandwidth_gbs=768,
        fp64_tflops=0.6,  # not on the datasheet: 1/64 of FP32 (GA102)
        fp32_tflops=38.7,
        bf16_tflops=154.8,
        tdp_w=300,
        nvlink_gbs=112.5,  # two-way NVLink bridge
        form_factor="PCIe",
        source="NVIDIA RTX A6000 datasheet (2020)",
        aliases=("A6000", "RTXA6000"),
    ),
    GpuModel(
        name="RTX-4090",
        vendor="NVIDIA",
        memory_gib=24,
        memory_bandwidth_gbs=1008,
        fp64_tflops=1.3,  # not on the datasheet: 1/64 of FP32 (AD102)
        fp32_tflops=82.6,
        bf16_tflops=165.2,  # with FP32 accumulate
        tdp_w=450,
        nvlink_gbs=0,
        form_factor="PCIe",
        source="NVIDIA Ada Lovelace GPU architecture whitepaper (2022), GeForce RTX 4090",
        aliases=("4090", "RTX4090", "GEFORCE-RTX-4090"),
    ),
    GpuModel(
        name="MI300X",
        vendor="AMD",
        memory_gib=192,
        memory_bandwidth_gbs=5300,
        fp64_tflops=81.7,  # vector
        fp32_tflops=163.4,  # vector
        bf16_tflops=1307.4,
        tdp_w=750,
        nvlink_gbs=896,  # AMD Infinity Fabric peak aggregate (7 links), no NVLink
        form_factor="OAM",
        source="AMD Instinct MI300X accelerator datasheet (2023)",
        aliases=("INSTINCT-MI300X", "AMD-MI300X"),
    ),
)


def _index() -> dict[str, GpuModel]:
    out: dict[str, GpuModel] = {}
    for m in GPU_MODELS:
        for key in (m.name, *m.aliases):
            out[key.upper()] = m
    return out


_BY_NAME = _index()


# A MIG device (a slice of a GPU with MIG mode on) is a model of its own: its parent's catalog
# name and the profile as nvidia-smi names it, "<GPU-instance slices>g.<memory GB>gb"
# ("H200-1g.18gb", "A100-40GB-3g.20gb"); "_" also separates them (Slurm's type names).
_MIG_NAME = re.compile(r"^(?P<parent>.+)[-_](?P<slices>[1-8])G\.(?P<gb>[0-9]{1,4})GB$")
MIG_COMPUTE_SLICES = 7  # a whole Ampere/Hopper/Blackwell GPU's compute (GPU-instance) slices


def mig_name(parent: str, profile: str) -> str:
    """The catalog name of a MIG device: ``mig_name("H200", "1g.18gb")`` → ``"H200-1g.18gb"``."""
    return f"{parent}-{profile}"


def find(name: str) -> GpuModel | None:
    """The catalog entry for a name or alias (case-insensitive), or None. A MIG profile of a
    known model ("H200-1g.18gb") is found too: a model derived from its parent's."""
    key = name.strip().upper()
    return _BY_NAME.get(key) or _mig_model(key)


@lru_cache(maxsize=256)
def _mig_model(key: str) -> GpuModel | None:
    """A MIG profile's figures: its parent's scaled by its share of the GPU, compute (and
    power) by its slices of the seven, memory bandwidth by its memory; no NVLink (a MIG device
    has no peer-to-peer). Approximations for planning: the datasheets give no MIG figures."""
    m = _MIG_NAME.match(key)
    if m is None:
        return None
    parent = _BY_NAME.get(m["parent"])
    if parent is None or parent.vendor != "NVIDIA":
        return None
    slices, gb = int(m["slices"]), int(m["gb"])
    if gb == 0 or gb > parent.memory_gib + 1:
        return None
    share = min(1.0, slices / MIG_COMPUTE_SLICES)
    return replace(
        parent,
        name=mig_name(parent.name, f"{slices}g.{gb}gb"),
        memory_gib=gb,
        memory_bandwidth_gbs=round(parent.memory_bandwidth_gbs * min(1.0, gb / parent.memory_gib)),
        fp64_tflops=round(parent.fp64_tflops * share, 2),
        fp32_tflops=round(parent.fp32_tflops * share, 2),
        bf16_tflops=round(parent.bf16_tflops * share, 1),
        tdp_w=round(parent.tdp_w * share),
        nvlink_gbs=0,
        source=f"a MIG profile of {parent.name}: its figures scaled by the profile's share",
        aliases=(),
    )


def mig_parent(name: str) -> GpuModel | None:
    """The whole GPU a MIG model is a slice of (None: not a MIG model)."""
    m = _MIG_NAME.match(name.strip().upper())
    return _BY_NAME.get(m["parent"]) if m is not None and _mig_model(m.group(0)) else None


def family(name: str) -> tuple[GpuModel, ...]:
    """The catalog models a site's GPU type name means, as Slurm's GRES types are named (the
    model in lower case, whatever its memory or form): ``a100`` is every A100, ``h100`` both
    H100s, ``v100`` both V100s; a name that is one model exactly (``a100-40gb``, ``l40s``) or an
    alias of one is that model. Empty when the catalog knows no such GPU."""
    key = name.strip().upper()
    if not key:
        return ()
    kin = tuple(
        m for m in GPU_MODELS if m.name.upper() == key or m.name.upper().startswith(key + "-")
    )
    if kin:
        return kin
    m = find(key)
    return (m,) if m is not None else ()


def gres_name(model: str) -> str:
    """Slurm's usual GRES type name for a catalog model: its family in lower case (``H100-SXM``
    → ``h100``, ``A100-40GB`` → ``a100``, ``L40S`` → ``l40s``, ``RTX-A6000`` → ``rtxa6000``).
    A site may name its types otherwise (the node's ``gres_type``); this is the default."""
    if not model:
        return ""
    m = _MIG_NAME.match(model.strip().upper())
    if m is not None and _mig_model(m.group(0)) is not None:  # h200_1g.18gb, as Slurm's types
        return f"{gres_name(_BY_NAME[m['parent']].name)}_{m['slices']}g.{m['gb']}gb"
    name = model.strip().lower()
    for suffix in ("-sxm", "-pcie"):
        name = name.removesuffix(suffix)
    head, sep, tail = name.rpartition("-")
    if sep and tail.endswith("gb") and (tail[:-2].isascii() and tail[:-2].isdigit()):
        name = head
    return name.replace("-", "")


def lookup(name: str, *, source: str = "", field: str = "gpu_model") -> GpuModel:
    """The catalog entry for ``name``; an unknown name is a SpecError listing the known ones."""
    m = find(name)
    if m is None:
        from gpufleet.model.validate import did_you_mean  # only for a mistyped name

        names = [g.name for g in GPU_MODELS]
        raise SpecError(
            f"unknown GPU model {name!r}{did_you_mean(name, names)} (known: {', '.join(names)}; "
            "or a MIG profile of one, e.g. H200-1g.18gb)",
            source=source,
            field=field,
        )
    return m
