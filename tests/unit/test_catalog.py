"""The GPU catalog: every required model, its aliases, and sanity bounds that catch typos."""

from __future__ import annotations

import pytest

from gpufleet.model.catalog import GPU_MODELS, GpuModel, find, lookup
from gpufleet.model.errors import SpecError

REQUIRED = (
    "B200",
    "H200",
    "H100-SXM",
    "H100-PCIe",
    "H800",
    "A100-40GB",
    "A100-80GB",
    "A800",
    "L40S",
    "L40",
    "A10",
    "T4",
    "V100-16GB",
    "V100-32GB",
    "P100",
    "RTX-A6000",
    "RTX-4090",
    "MI300X",
)

# Parts with tensor (or matrix) cores from Volta on; P100 has none.
TENSOR_CORE_PARTS = tuple(n for n in REQUIRED if n != "P100")


@pytest.mark.parametrize("name", REQUIRED)
def test_every_required_model_is_present_under_its_canonical_name(name: str) -> None:
    assert lookup(name).name == name


def test_canonical_names_and_aliases_are_unique() -> None:
    keys = [k.upper() for m in GPU_MODELS for k in (m.name, *m.aliases)]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize(
    ("alias", "canonical"),
    [
        ("H100", "H100-SXM"),
        ("h100", "H100-SXM"),
        ("A100", "A100-80GB"),
        ("a100", "A100-80GB"),
        ("V100", "V100-32GB"),
        ("V100M16", "V100-16GB"),
        ("v100m16", "V100-16GB"),
        ("V100M32", "V100-32GB"),
        ("P100", "P100"),
        ("p100", "P100"),
        ("T4", "T4"),
        ("t4", "T4"),
        ("A10", "A10"),
        ("a10", "A10"),
        ("h100-pcie", "H100-PCIe"),
        ("rtx-a6000", "RTX-A6000"),
        ("mi300x", "MI300X"),
        ("  h200  ", "H200"),
    ],
)
def test_aliases_resolve_case_insensitively(alias: str, canonical: str) -> None:
    assert lookup(alias).name == canonical
    assert find(alias) is lookup(canonical)


@pytest.mark.parametrize("name", ["G2", "G3"])
def test_anonymized_openb_models_have_no_entry(name: str) -> None:
    assert find(name) is None


def test_unknown_name_is_a_spec_error_listing_known_names() -> None:
    assert find("nonsense") is None
    with pytest.raises(SpecError) as info:
        lookup("nonsense")
    err = info.value
    assert err.field == "gpu_model"
    assert "nonsense" in str(err)
    for name in REQUIRED:
        assert name in str(err)


def test_unknown_name_keeps_the_given_source_and_field() -> None:
    with pytest.raises(SpecError) as info:
        lookup("nonsense", source="cluster.yaml", field="pools[0].gpu_model")
    assert info.value.source == "cluster.yaml"
    assert info.value.field == "pools[0].gpu_model"


@pytest.mark.parametrize("model", GPU_MODELS, ids=lambda m: m.name)
def test_figures_are_plausible(model: GpuModel) -> None:
    assert model.vendor in {"NVIDIA", "AMD"}
    assert model.memory_gib > 0
    assert model.memory_bandwidth_gbs > 100
    assert 50 <= model.tdp_w <= 1500
    assert model.fp64_tflops > 0
    assert model.fp32_tflops > model.fp64_tflops
    assert model.bf16_tflops >= model.fp32_tflops
    assert model.nvlink_gbs >= 0
    assert model.form_factor in {"SXM", "PCIe", "OAM"}
    assert model.source.strip()


@pytest.mark.parametrize("name", TENSOR_CORE_PARTS)
def test_tensor_core_parts_beat_fp32_by_far(name: str) -> None:
    m = lookup(name)
    assert m.bf16_tflops >= 2 * m.fp32_tflops


def test_datasheet_anchors() -> None:
    assert lookup("H200").memory_gib == 141
    assert lookup("B200").memory_gib in (180, 192)
    assert lookup("MI300X").memory_gib == 192
    assert lookup("MI300X").form_factor == "OAM"
    h100 = lookup("H100-SXM")
    assert (h100.memory_gib, h100.nvlink_gbs, h100.tdp_w) == (80, 900, 700)
    assert lookup("A100-40GB").memory_gib == 40
    assert lookup("A100-80GB").memory_gib == 80
    assert lookup("V100-16GB").memory_gib == 16
    assert lookup("V100-32GB").memory_gib == 32


def test_export_parts_have_cut_interconnect() -> None:
    assert lookup("H800").nvlink_gbs < lookup("H100-SXM").nvlink_gbs
    assert lookup("A800").nvlink_gbs < lookup("A100-80GB").nvlink_gbs
    assert lookup("H800").fp64_tflops < lookup("H100-SXM").fp64_tflops


def test_pcie_cards_without_bridges_have_no_nvlink() -> None:
    for name in ("L40S", "L40", "A10", "T4", "P100", "RTX-4090"):
        assert lookup(name).nvlink_gbs == 0
        assert lookup(name).form_factor == "PCIe"


def test_a_site_gpu_type_name_means_the_models_family() -> None:
    from gpufleet.model.catalog import family

    names = lambda t: [m.name for m in family(t)]  # noqa: E731
    assert names("a100") == names("A100") == ["A100-40GB", "A100-80GB"]
    assert names("h100") == ["H100-SXM", "H100-PCIe"]
    assert names("a100-80gb") == ["A100-80GB"] and names("l40") == ["L40"]
    assert names("a6000") == ["RTX-A6000"]  # an alias of one model
    assert names("1080ti") == [] and names("") == []


def test_a_mig_profile_of_a_known_model_is_a_model_of_its_own() -> None:
    from gpufleet.model.catalog import family, gres_name, mig_name, mig_parent

    h200 = lookup("H200")
    m = lookup("h200-1g.18gb")  # case-insensitive, as every name
    assert (m.name, m.memory_gib, m.nvlink_gbs) == ("H200-1g.18gb", 18, 0)
    assert m.bf16_tflops == pytest.approx(h200.bf16_tflops / 7, rel=0.01)  # one slice of seven
    assert mig_name("H200", "3g.71gb") == "H200-3g.71gb" == lookup("H200_3g.71gb").name
    assert lookup("A100-40GB-3g.20gb").name == "A100-40GB-3g.20gb"
    assert mig_parent("H200-1g.18gb") == h200 and mig_parent("H200") is None
    assert gres_name("H200-1g.18gb") == "h200_1g.18gb"  # Slurm's form of a MIG type
    assert gres_name("A100-40GB-3g.20gb") == "a100_3g.20gb"
    # a whole model's family never takes in its slices: "h200" asks for a whole GPU
    assert [x.name for x in family("h200")] == ["H200"]
    assert family("h200_1g.18gb") == (m,)


@pytest.mark.parametrize(
    "name", ["H200-9g.18gb", "H200-1g.999gb", "H200-1g.0gb", "Foo-1g.5gb", "MI300X-1g.24gb"]
)
def test_a_mig_name_that_cannot_be_is_unknown(name: str) -> None:
    assert find(name) is None
    with pytest.raises(SpecError, match="MIG profile"):
        lookup(name)
