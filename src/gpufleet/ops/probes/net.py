"""The network probe: one rank per node of a gang measures the links between them.

Rank 0 coordinates at MASTER_ADDR:MASTER_PORT: every rank says where its data listener is,
rank 0 answers with everyone's address (as it saw each connection arrive) and then holds a
barrier between rounds. In round k each rank sends to rank (r + k) mod N while it receives
from rank (r − k) mod N, so every node sends once and receives once per round: ``ring`` is
round 1, ``pairs`` is rounds 1 … N−1 (every ordered pair).

On each link: the round-trip time of 1-byte ping-pongs (TCP_NODELAY), then a stream of up to
``--mb`` MiB for up to ``--seconds`` s, timed by the receiver from the start mark to the end of
the stream; with iperf3 on every node, iperf3 measures the bandwidth instead.
"""

from __future__ import annotations

import argparse
import functools
import json
import socket
import statistics
import subprocess
import threading
import time
from collections.abc import Sequence
from typing import Any

from . import common, system

CHUNK = 1 << 20


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpufleet-probe net")
    p.add_argument("--mode", choices=("ring", "pairs"), default="ring")
    p.add_argument("--mb", type=int, default=256)
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--rtt-samples", type=int, default=50)
    p.add_argument("--iperf3", choices=("auto", "never"), default="auto")
    p.add_argument("--timeout", type=float, default=60.0)
    return p


# ----- line protocol ------------------------------------------------------------------------


def send_json(sock: socket.socket, obj: Any) -> None:
    sock.sendall(json.dumps(obj).encode() + b"\n")


def recv_json(sock: socket.socket) -> Any:
    """One JSON line, read a byte at a time so no byte of what follows is consumed."""
    buf = bytearray()
    while True:
        b = sock.recv(1)
        if not b:
            raise ConnectionError("the peer closed the connection mid-message")
        if b == b"\n":
            try:
                return json.loads(buf.decode())
            except ValueError:  # not the probe's line: say what came, not only that it is bad
                raise ConnectionError(f"not a message of the probe: {bytes(buf[:120])!r}") from None
        buf += b


def connect(addr: str, port: int, deadline: float) -> socket.socket:
    """Connect, retrying while the other side is not listening yet."""
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            s = socket.create_connection(
                (addr, port), timeout=max(1.0, deadline - time.monotonic())
            )
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return s
        except OSError as e:
            last = e
            time.sleep(0.1)
    raise TimeoutError(f"cannot connect to {addr}:{port}: {last}")


# ----- the coordinator (rank 0) ---------------------------------------------------------------


class Coordinator(threading.Thread):
    def __init__(self, world: int, port: int, rounds: int, timeout: float) -> None:
        super().__init__(daemon=True, name="coordinator")
        self.world, self.rounds, self.timeout = world, rounds, timeout
        self.srv = socket.create_server(("0.0.0.0", port), reuse_port=False)
        self.srv.settimeout(timeout)
        self.error: str | None = None

    def run(self) -> None:
        conns: dict[int, socket.socket] = {}
        try:
            peers: dict[int, dict[str, Any]] = {}
            while len(conns) < self.world:
                c, (addr, _) = self.srv.accept()
                c.settimeout(self.timeout)
                try:
                    hello = recv_json(c)
                    rank = int(hello["rank"])
                except (OSError, ValueError, KeyError, TypeError):
                    # not a rank: another program that found the port (on a host of several
                    # nodes, or in the ephemeral range, someone polling their own server's
                    # port); closed, and the ranks are waited for still
                    c.close()
                    continue
                if not 0 <= rank < self.world:
                    c.close()
                    continue
                if rank in conns:  # the rank again (it reconnected): the newer connection
                    conns[rank].close()
                conns[rank] = c
                peers[rank] = {**hello, "addr": addr}
            table = [peers[r] for r in range(self.world)]
            for c in conns.values():
                send_json(c, {"peers": table})
            for k in range(self.rounds):
                for c in conns.values():
                    recv_json(c)
                for c in conns.values():
                    send_json(c, {"go": k})
        except Exception as e:  # the ranks time out and say so; this is the detail
            self.error = f"{type(e).__name__}: {e}"
        finally:
            for c in conns.values():
                c.close()
            self.srv.close()


# ----- one link -------------------------------------------------------------------------------


def receive(srv: socket.socket, out: dict[str, Any], timeout: float) -> None:
    """Serve one sender: echo pings, time its stream (or host its iperf3 run)."""
    try:
        srv.settimeout(timeout)
        c, _ = srv.accept()
        with c:
            c.settimeout(timeout)
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            hdr = recv_json(c)
            out["from"] = hdr.get("from")
            if hdr.get("iperf3"):
                _host_iperf3(c)
            while True:
                b = c.recv(1)
                if b == b"p":
                    c.sendall(b"p")
                elif b == b"s":
                    break
                else:
                    raise ConnectionError(f"unexpected {b!r} from the sender")
            n, t0 = 0, time.perf_counter()
            while True:
                data = c.recv(CHUNK)
                if not data:
                    break
                n += len(data)
            send_json(c, {"bytes": n, "seconds": time.perf_counter() - t0})
    except Exception as e:
        out["error"] = f"receiving: {type(e).__name__}: {e}"


def _host_iperf3(c: socket.socket) -> None:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        port = s.getsockname()[1]
    p = subprocess.Popen(
        ["iperf3", "-s", "-1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        time.sleep(0.3)
        send_json(c, {"iperf3_port": port})
        recv_json(c)  # the sender is done
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()


def parse_iperf3(text: str) -> common.Result:
    """``iperf3 -J`` → received bits per second and, on Linux, the mean TCP RTT."""
    doc = json.loads(text)
    if doc.get("error"):
        return {"error": str(doc["error"])}
    end = doc.get("end", {})
    bps = end.get("sum_received", {}).get("bits_per_second")
    res: common.Result = {"gbps": round(bps / 1e9, 3) if bps else None}
    streams = end.get("streams") or []
    rtt = streams[0].get("sender", {}).get("mean_rtt") if streams else None
    if rtt:
        res["iperf3_rtt_ms"] = rtt / 1000.0
    return res


def send(
    addr: str,
    port: int,
    *,
    rank: int,
    mb: int,
    seconds: float,
    samples: int,
    iperf3: bool,
    deadline: float,
) -> common.Result:
    res: common.Result = {"tool": "iperf3" if iperf3 else "builtin"}
    with connect(addr, port, deadline) as c:
        c.settimeout(max(5.0, deadline - time.monotonic()))
        send_json(c, {"from": rank, "iperf3": iperf3})
        if iperf3:
            iport = recv_json(c)["iperf3_port"]
            r = common.run(
                ["iperf3", "-c", addr, "-p", str(iport), "-t", str(max(1, round(seconds))), "-J"],
                timeout=seconds + 30,
            )
            res.update(parse_iperf3(r["out"]) if r["rc"] is not None else {"error": r["error"]})
            send_json(c, {"done": True})
        rtts = []
        for _ in range(max(1, samples)):
            t0 = time.perf_counter()
            c.sendall(b"p")
            if c.recv(1) != b"p":
                raise ConnectionError("the receiver did not echo")
            rtts.append(time.perf_counter() - t0)
        res["rtt_ms"] = round(statistics.median(rtts) * 1000, 4)
        res["rtt_min_ms"] = round(min(rtts) * 1000, 4)
        c.sendall(b"s")
        buf, sent, t0 = b"\0" * CHUNK, 0, time.perf_counter()
        limit = 0 if iperf3 else mb << 20  # iperf3 measured the bandwidth already
        while sent < limit and time.perf_counter() - t0 < seconds:
            c.sendall(buf)
            sent += CHUNK
        c.shutdown(socket.SHUT_WR)
        stats = recv_json(c)
    if not iperf3:
        secs = max(stats["seconds"], 1e-9)
        res["gbps"] = round(stats["bytes"] * 8 / secs / 1e9, 3)
        res["bytes"] = stats["bytes"]
        res["seconds"] = round(secs, 3)
    return res


# ----- the rank ------------------------------------------------------------------------------


def probe(args: argparse.Namespace) -> common.Result:
    env = common.rank_env()
    rank, world = env["rank"], env["world"]
    res: common.Result = {"probe": "net", "rank": rank, "world": world, "links": []}
    if world < 2:
        res["error"] = "the network test needs at least two ranks"
        return res
    deadline = time.monotonic() + args.timeout
    rounds = [1] if args.mode == "ring" else list(range(1, world))
    coord = None
    if rank == 0:
        coord = Coordinator(world, env["master_port"], len(rounds), args.timeout)
        coord.start()
    data = socket.create_server(("0.0.0.0", 0))
    has_iperf3 = args.iperf3 == "auto" and common.which("iperf3") is not None
    try:
        link = connect(env["master_addr"], env["master_port"], deadline)
        with link:
            link.settimeout(args.timeout)
            send_json(link, {"rank": rank, "port": data.getsockname()[1], "iperf3": has_iperf3})
            peers = recv_json(link)["peers"]
            use_iperf3 = all(p.get("iperf3") for p in peers)
            for k in rounds:
                dst = peers[(rank + k) % world]
                got: dict[str, Any] = {}
                t = threading.Thread(target=receive, args=(data, got, args.timeout), daemon=True)
                t.start()
                row: common.Result = {
                    "src": rank,
                    "dst": (rank + k) % world,
                    "dst_addr": dst["addr"],
                }
                row.update(
                    common.guarded(
                        "send",
                        functools.partial(
                            send,
                            dst["addr"],
                            int(dst["port"]),
                            rank=rank,
                            mb=args.mb,
                            seconds=args.seconds,
                            samples=args.rtt_samples,
                            iperf3=use_iperf3,
                            deadline=deadline,
                        ),
                    )
                )
                t.join(args.timeout)
                if got.get("error"):
                    row["receive_error"] = got["error"]
                row["route"] = system.route_to(dst["addr"])
                res["links"].append(row)
                send_json(link, {"barrier": k})
                recv_json(link)
    except Exception as e:
        res["error"] = f"{type(e).__name__}: {e}"
    finally:
        data.close()
    if coord is not None:
        coord.join(5)
        if coord.error:
            res["coordinator_error"] = coord.error
    devs = {r.get("route", {}).get("dev") for r in res["links"]}
    res["interfaces"] = [i for i in system.interfaces() if i["name"] in devs]
    return res


def main(argv: Sequence[str] | None = None) -> int:
    common.emit(probe(parser().parse_args(argv)))
    return 0
