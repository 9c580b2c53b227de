"""What a GPU model has beside its compute: video engines, graphics and display, full-rate FP64.

A training GPU and a graphics GPU differ here more than in TFLOPS: an H100 decodes video (7
NVDEC) but encodes none (no NVENC) and has no RT cores; an L40S encodes (3 NVENC), renders (142
RT cores) and drives displays. Placement, the Reasons, the agent's driver capabilities and the
metrics read this table, never a GPU's name.

name          NVENC NVDEC NVJPG  RT cores  display  FP64  sessions  source
B200              —     —     —         —        —  full      —     not in the catalog below
H200              0     7     7         0        0  full      —     H200 datasheet (2024)
H100-SXM          0     7     7         0        0  full      —     H100 datasheet (2023)
H100-PCIe         0     7     7         0        0  full      —     H100 datasheet (2023)
H800              0     7     7         0        0  1 TF      —     as H100 (export part)
A100-40GB/80GB    0     5     1         0        0  full      —     A100 datasheet (2021)
A800              0     5     1         0        0  full      —     as A100 (export part)
L40S / L40        3     3     4       142        4  —         —     L40S / L40 datasheets
RTX-6000-Ada      3     3     4       142        4  —         —     RTX 6000 Ada datasheet (2023)
L4                2     4     4        60        0  —         —     L4 datasheet (2023)
A10               1     2     0        72        0  —         —     A10 datasheet (2021)
A16 (per GPU)     1     2     0        10        0  —         —     A16 datasheet (2021), 4 a board
T4                1     2     0        40        0  —         —     T4 datasheet (2019)
RTX-A6000         1     2     0        84        4  —         —     RTX A6000 datasheet (2020)
RTX-4090          2     1     0       128        4  —         8     Ada whitepaper; GeForce limit
V100, P100        —     —     —         0        0  full      —     engines not on the datasheets
MI300X            0     0     0         0        0  full      —     AMD (VCN engines, not NVIDIA's)

"—" in the engine columns: not known here (the datasheet does not say): such a GPU is never
chosen for a job that asks for that engine, and the Reason says the catalog does not know.
"sessions": the driver's limit on concurrent NVENC sessions per GPU (GeForce parts; data
centre parts have none). A MIG device offers no engine here: its share of NVDEC/NVJPG depends
on the profile (``+me``) and is not modelled, as NVML reports no encoder statistics on MIG.
"""

from __future__ import annotations

from dataclasses import dataclass

# what a job can ask of its GPUs (``--gres=nvenc:N``, a spec's ``gpu_engines: {...}``, ``-C``): each
# also a node feature of nodes whose GPUs have it
ENGINES = ("nvenc", "nvdec", "nvjpg")
CAPABILITIES = (*ENGINES, "graphics", "display", "fp64")


@dataclass(frozen=True, slots=True)
class Engines:
    nvenc: int | None  # None: not known
    nvdec: int | None
    nvjpg: int | None
    rt_cores: int = 0  # a graphics part (RT cores, the full graphics pipeline) when > 0
    display_outputs: int = 0
    full_fp64: bool = False  # FP64 at half the FP32 rate or better (HPC parts)
    nvenc_sessions: int = 0  # the driver's concurrent-session limit per GPU; 0: none
    source: str = ""

    def count(self, engine: str) -> int | None:
        return {"nvenc": self.nvenc, "nvdec": self.nvdec, "nvjpg": self.nvjpg}[engine]

    def features(self) -> frozenset[str]:
        """The capability names this GPU has, as node features (``-C graphics``)."""
        out = {e for e in ENGINES if (self.count(e) or 0) > 0}
        if self.rt_cores:
            out.add("graphics")
        if self.display_outputs:
            out.add("display")
        if self.full_fp64:
            out.add("fp64")
        return frozenset(out)


_HOPPER = Engines(0, 7, 7, full_fp64=True, source="NVIDIA H100 Tensor Core GPU datasheet (2023)")
_AMPERE_HPC = Engines(0, 5, 1, full_fp64=True, source="NVIDIA A100 datasheet (2021)")
_AD102 = Engines(3, 3, 4, rt_cores=142, display_outputs=4, source="NVIDIA L40S datasheet (2023)")
_HPC_UNKNOWN = Engines(
    None, None, None, full_fp64=True, source="video engines not on the datasheet"
)

_BY_MODEL: dict[str, Engines] = {
    "B200": _HPC_UNKNOWN,
    "H200": Engines(0, 7, 7, full_fp64=True, source="NVIDIA H200 Tensor Core GPU datasheet (2024)"),
    "H100-SXM": _HOPPER,
    "H100-PCIe": _HOPPER,
    "H800": Engines(0, 7, 7, source="as the H100 (NVIDIA H800: the export part, FP64 1 TF)"),
    "A100-40GB": _AMPERE_HPC,
    "A100-80GB": _AMPERE_HPC,
    "A800": _AMPERE_HPC,
    "L40S": _AD102,
    "L40": Engines(3, 3, 4, rt_cores=142, display_outputs=4, source="NVIDIA L40 datasheet (2022)"),
    "RTX-6000-Ada": Engines(
        3, 3, 4, rt_cores=142, display_outputs=4, source="NVIDIA RTX 6000 Ada datasheet (2023)"
    ),
    "L4": Engines(2, 4, 4, rt_cores=60, source="NVIDIA L4 Tensor Core GPU datasheet (2023)"),
    "A10": Engines(1, 2, 0, rt_cores=72, source="NVIDIA A10 Tensor Core GPU datasheet (2021)"),
    "A16": Engines(1, 2, 0, rt_cores=10, source="NVIDIA A16 datasheet (2021): per GPU, 4 a board"),
    "T4": Engines(1, 2, 0, rt_cores=40, source="NVIDIA T4 Tensor Core GPU datasheet (2019)"),
    "RTX-A6000": Engines(
        1, 2, 0, rt_cores=84, display_outputs=4, source="NVIDIA RTX A6000 datasheet (2020)"
    ),
    "RTX-4090": Engines(
        2,
        1,
        0,
        rt_cores=128,
        display_outputs=4,
        nvenc_sessions=8,
        source="NVIDIA Ada Lovelace architecture whitepaper (2022); GeForce NVENC session limit",
    ),
    "V100-16GB": _HPC_UNKNOWN,
    "V100-32GB": _HPC_UNKNOWN,
    "P100": _HPC_UNKNOWN,
    "MI300X": Engines(0, 0, 0, full_fp64=True, source="AMD: VCN media engines, not NVIDIA's"),
}

NONE_KNOWN = Engines(None, None, None, source="not in the catalog")


def engines_of(model: str) -> Engines:
    """The engines of a catalog model (a name or alias); ``NONE_KNOWN`` for a MIG device or a
    model the catalog does not know."""
    from gpufleet.model.catalog import find

    m = find(model) if model else None
    if m is None:
        return NONE_KNOWN
    return _BY_MODEL.get(m.name, NONE_KNOWN)


_CACHE: dict[str, frozenset[str]] = {}


def gpu_features(model: str) -> frozenset[str]:
    """The capability features of a node whose GPUs are ``model`` (``nvenc``, ``graphics``...)."""
    got = _CACHE.get(model)
    if got is None:
        got = _CACHE[model] = engines_of(model).features()
    return got


def lacking(model: str, wanted: dict[str, int]) -> list[str]:
    """The engines of ``wanted`` (name → at least that many per GPU) a ``model`` GPU lacks."""
    e = engines_of(model)
    out = []
    for name, n in wanted.items():
        have = e.count(name) if name in ENGINES else (1 if name in e.features() else 0)
        if have is None or have < n:
            out.append(name)
    return out


# a node label: its pool packs video jobs beside training ("true") or keeps them apart
# ("false"), whatever the controller's --pack-encoders (scheduler/pack_encoders.py, ADR 0060)
PACK_LABEL = "gpufleet.io/pack-encoders"
