"""A plain multi-process gang job (no PyTorch needed): every rank connects to rank 0 at
MASTER_ADDR:MASTER_PORT and sends its rank; rank 0 checks it heard from all WORLD_SIZE ranks.
It proves the launcher environment is right and that the gang runs together."""

from __future__ import annotations

import os
import socket
import sys
import time


def main() -> int:
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    if rank == 0:
        srv = socket.create_server(("0.0.0.0", port))
        srv.settimeout(60)
        seen = {0}
        while len(seen) < world:
            conn, _ = srv.accept()
            with conn:
                seen.add(int(conn.recv(16).decode()))
        print(f"WORLD_SIZE={world} RANK=0 heard from ranks {sorted(seen)}", flush=True)
        return 0
    deadline = time.monotonic() + 60
    while True:
        try:
            with socket.create_connection((addr, port), timeout=5) as c:
                c.sendall(str(rank).encode())
            print(f"rank {rank} of {world} reported to {addr}:{port}", flush=True)
            return 0
        except OSError:
            if time.monotonic() > deadline:
                print(f"rank {rank}: rank 0 never listened at {addr}:{port}", file=sys.stderr)
                return 1
            time.sleep(0.2)  # rank 0 may not listen yet: a real process, a real wait


if __name__ == "__main__":
    sys.exit(main())
