"""What Prometheus and Grafana need to watch a gpufleet cluster, shipped in the package: the alert
rules (``rules/gpufleet.rules.yml``, with their promtool unit tests in ``rules/tests/``), a
Grafana dashboard (``grafana/gpufleet.json``) and a scrape config for the controller's
/metrics. ``python -m gpufleet.monitoring`` prints the paths and the scrape config."""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
RULES = HERE / "rules" / "gpufleet.rules.yml"
RULE_TESTS = HERE / "rules" / "tests"
DASHBOARD = HERE / "grafana" / "gpufleet.json"


def rule_tests() -> list[Path]:
    return sorted(RULE_TESTS.glob("*.yml"))


def prometheus_config(
    target: str,
    *,
    rules: Path | None = RULES,
    scrape_interval_s: float = 15,
    evaluation_interval_s: float = 15,
    token: str | None = None,
    job: str = "gpufleet",
) -> str:
    """A prometheus.yml that scrapes one controller (``host:port``) and loads the rules. The
    controller's /metrics holds every node's GPUs: one target, however large the cluster."""
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
    ]
    if token:
        lines += ["    authorization:", f"      credentials: {token!r}"]
    return "\n".join(lines) + "\n"


__all__ = ["DASHBOARD", "RULES", "RULE_TESTS", "prometheus_config", "rule_tests"]
