"""``python -m gpufleet.monitoring [HOST:PORT [TOKEN_FILE]]``: where the rules and the dashboard
are, and a prometheus.yml for a controller whose metrics token Prometheus reads from TOKEN_FILE
(default /etc/prometheus/gpufleet-metrics.token; ``-`` for none: a controller run with
``--metrics-public``)."""

from __future__ import annotations

import sys

from gpufleet.monitoring import DASHBOARD, DEFAULT_TOKEN_FILE, RULES, prometheus_config


def main(argv: list[str]) -> int:
    target = argv[0] if argv else "127.0.0.1:8600"
    token_file = argv[1] if len(argv) > 1 else DEFAULT_TOKEN_FILE
    print(f"# rules:     {RULES}\n# dashboard: {DASHBOARD}")
    if token_file != "-":
        print(
            f"# the metrics token: gpufleet token create prometheus --role metrics "
            f"--out {token_file}\n#   (then let Prometheus read it: chown prometheus {token_file})"
        )
    print("# prometheus.yml:")
    print(prometheus_config(target, token_file=None if token_file == "-" else token_file), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
