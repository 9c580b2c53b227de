"""An elastic pool in the cluster spec: its nodes named up front, its settings checked."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.model.cluster import ClusterSpec
from gpufleet.model.errors import SpecError


def spec(elastic: Any, **pool: Any) -> dict[str, Any]:
    base = {"name": "burst", "gpu_model": "H100-SXM", "gpus": 8, "cpu_cores": 64}
    return {"pools": [{**base, "memory_gib": 512, "elastic": elastic, **pool}]}


def test_an_elastic_pool_names_its_max_nodes_and_holds_none_in_the_fixed_nodes() -> None:
    c = ClusterSpec.from_dict(
        spec({"min": 1, "max": 3, "provider": "local", "node_hour_cost": 9.5})
    )
    assert c.nodes == ()
    (p,) = c.elastic
    assert [n.name for n in p.nodes] == ["burst-000", "burst-001", "burst-002"]
    assert (p.spec.min, p.spec.max, p.spec.provider.name, p.spec.node_hour_cost) == (
        1, 3, "local", 9.5,
    )  # fmt: skip


def test_the_command_provider_takes_its_scripts() -> None:
    prov = {"name": "command", "resume": "/site/resume", "suspend": "/site/suspend"}
    (p,) = ClusterSpec.from_dict(spec({"max": 2, "provider": prov})).elastic
    assert p.spec.provider.option("resume") == "/site/resume"


@pytest.mark.parametrize(
    ("elastic", "extra", "field", "words"),
    [
        ({"max": 2, "provider": "local"}, {"count": 2}, "pools[0].count", "no count"),
        ({"min": 3, "max": 2, "provider": "local"}, {}, "pools[0].elastic.min", "at most max"),
        ({"max": 2, "provider": "cloudy"}, {}, "pools[0].elastic.provider", "unknown provider"),
        ({"max": 2}, {}, "pools[0].elastic.provider", "is required"),
        ({"max": 2, "provider": {"name": "command"}}, {}, "resume", "is required"),
        ({"max": 2, "provider": "local", "spare": 1}, {}, "pools[0].elastic.spare", "unknown"),
    ],
)
def test_bad_elastic_settings_are_refused_by_field(
    elastic: Any, extra: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(SpecError) as e:
        ClusterSpec.from_dict(spec(elastic, **extra))
    assert field in str(e.value) and words in str(e.value)
