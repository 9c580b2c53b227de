"""What each device probe records into: ``OUT`` (where its JSON goes), ``res`` (the record, its
errors listed), ``logs`` (every log line, gpufleet's backend's among them: its DEBUG ones say
which NVML calls failed). Imported first by the probes (run as files: this folder is on their
path), it catches the logging from then on."""

import logging
import os
from typing import Any

OUT = os.environ.get("OUT", "/tmp/out")
res: dict[str, Any] = {"errors": []}
logs: list[str] = []


class _Keep(logging.Handler):
    def emit(self, r: logging.LogRecord) -> None:
        logs.append(f"{r.levelname} {r.name}: {r.getMessage()}")


logging.getLogger().addHandler(_Keep())
logging.getLogger().setLevel(logging.DEBUG)
