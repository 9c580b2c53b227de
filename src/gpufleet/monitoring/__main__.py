"""``python -m gpufleet.monitoring [HOST:PORT]``: where the rules and the dashboard are, and a
prometheus.yml for a controller."""

from __future__ import annotations

import sys

from gpufleet.monitoring import DASHBOARD, RULES, prometheus_config


def main(argv: list[str]) -> int:
    target = argv[0] if argv else "127.0.0.1:8600"
    print(f"# rules:     {RULES}\n# dashboard: {DASHBOARD}\n# prometheus.yml:")
    print(prometheus_config(target), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
