"""What Prometheus and Grafana need to watch a gpufleet cluster, shipped in the package: the alert
rules (``rules/gpufleet.rules.yml``, with their promtool unit tests in ``rules/tests/``), a
Grafana dashboard (``grafana/gpufleet.json``) and a scrape config for the controller's
/metrics (``prometheus_config``; ``prometheus.example.yml`` is a commented one, with a scrape
target per node). ``python -m gpufleet.monitoring`` prints the paths and the scrape config.
The controller's /metrics needs a metrics token (``gpufleet token create prometheus --role
metrics --out FILE``); the configs give Prometheus its file (``authorization:
credentials_file``), so the secret is in no config.

Scraping per node: the controller serves every node's GPUs, so one target puts them all under
one ``instance``, and the ``instance`` picker of NVIDIA's DCGM dashboard shows the controller.
``/metrics?node=NAME`` serves only that node's GPU series and ``/metrics?gpus=false`` everything
but them; one target per node (each the controller's address with ``__param_node`` set, its
``instance`` relabelled to the node's name) and one for the rest give every series exactly once,
with ``instance`` meaning a node as with one dcgm-exporter per node. Targets can be static (the
``nodes`` argument) or a file_sd file that lists them (``node_targets_file``; ``file_sd_targets``
writes it, and Prometheus rereads it when nodes come and go)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
RULES = HERE / "rules" / "gpufleet.rules.yml"
RULE_TESTS = HERE / "rules" / "tests"
DASHBOARD = HERE / "grafana" / "gpufleet.json"
EXAMPLE_CONFIG = HERE / "prometheus.example.yml"
# where the scrape config looks for the metrics token by default (readable by Prometheus only)
DEFAULT_TOKEN_FILE = "/etc/prometheus/gpufleet-metrics.token"


def rule_tests() -> list[Path]:
    return sorted(RULE_TESTS.glob("*.yml"))


def prometheus_config(
    target: str,
    *,
    rules: Path | None = RULES,
    scrape_interval_s: float = 15,
    evaluation_interval_s: float = 15,
    token_file: str | Path | None = DEFAULT_TOKEN_FILE,
    job: str = "gpufleet",
    nodes: Sequence[str] | None = None,
    node_targets_file: Path | None = None,
) -> str:
    """A prometheus.yml that scrapes one controller (``host:port``) and loads the rules. The
    controller's /metrics holds every node's GPUs: one target, however large the cluster.
    With ``nodes`` (static) or ``node_targets_file`` (file_sd, see ``file_sd_targets``), a
    second job ``{job}-gpus`` scrapes each node's GPU series apart, with ``instance`` set to
    the node's name, and the first job takes the rest (``gpus=false``). Prometheus reads the
    metrics token from ``token_file`` (``gpufleet token create prometheus --role metrics --out
    FILE``); None: no token, for a controller run with ``--metrics-public``."""
    per_node = nodes is not None or node_targets_file is not None
    auth = (
        ["    authorization:", f"      credentials_file: {str(token_file)!r}"]
        if token_file is not None
        else []
    )
    lines = [
        "global:",
        f"  scrape_interval: {scrape_interval_s:g}s",
        f"  evaluation_interval: {evaluation_interval_s:g}s",
    ]
    if rules is not None:
        lines += ["rule_files:", f"  - {str(rules)!r}"]
    lines += [
        "scrape_configs:",
        f"  - job_name: {job!r}",
        f"    scrape_timeout: {min(10.0, scrape_interval_s):g}s",
        "    static_configs:",
        f"      - targets: [{target!r}]",
        *auth,
    ]
    if per_node:
        lines += [
            "    params:",
            "      gpus: ['false']  # the GPU series come per node, from the job below",
            f"  - job_name: {job + '-gpus'!r}",
            f"    scrape_timeout: {min(10.0, scrape_interval_s):g}s",
            *auth,
        ]
        if node_targets_file is not None:
            lines += ["    file_sd_configs:", f"      - files: [{str(node_targets_file)!r}]"]
        if nodes:
            lines += ["    static_configs:"]
            for n in nodes:
                lines += [
                    f"      - targets: [{target!r}]",
                    f"        labels: {{__param_node: {n!r}}}",
                ]
        lines += [
            "    relabel_configs:  # instance: the node, as with a dcgm-exporter per node",
            "      - source_labels: [__param_node]",
            "        target_label: instance",
        ]
    return "\n".join(lines) + "\n"


def file_sd_targets(target: str, nodes: Sequence[str]) -> str:
    """The file_sd JSON for ``node_targets_file``: the controller's address once per node,
    with the node as the ``node`` URL parameter."""
    groups = [{"targets": [target], "labels": {"__param_node": n}} for n in nodes]
    return json.dumps(groups, indent=2) + "\n"


__all__ = [
    "DASHBOARD",
    "DEFAULT_TOKEN_FILE",
    "EXAMPLE_CONFIG",
    "RULES",
    "RULE_TESTS",
    "file_sd_targets",
    "prometheus_config",
    "rule_tests",
]
