"""Storage as a job sees it: does a shared path hold the same content on every node (rank 0
writes a marker, every rank hashes what it reads), and how fast are sequential writes (with
fsync), sequential reads (page cache dropped first) and small-file creates and random 4 KiB
reads. fio measures instead where it is installed."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import time

from . import common

CHUNK = 4 << 20
SMALL = 4096
STALE_MARKER_S = 3600.0


def fs_type(path: str) -> common.Result:
    """The mount that holds ``path`` (longest prefix in /proc/mounts)."""
    real = os.path.realpath(path)
    best = {"mount": "", "fstype": "", "source": ""}
    for line in (common.read_text("/proc/mounts", 1 << 20) or "").splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        mnt = parts[1].replace("\\040", " ")
        inside = real == mnt or real.startswith(mnt.rstrip("/") + "/")
        if inside and len(mnt) >= len(best["mount"]):
            best = {"mount": mnt, "fstype": parts[2], "source": parts[0]}
    return best


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def marker(shared: str, token: str, rank: int, job: str, wait_s: float = 20.0) -> common.Result:
    """Rank 0 writes ``<shared>/.gpufleet-validate/<job>.marker`` (atomically); every rank
    waits for it and reports the SHA-256 of what it reads."""
    res: common.Result = {"path": shared, "exists": os.path.isdir(shared), **fs_type(shared)}
    if not res["exists"]:
        res["error"] = f"{shared} does not exist on this node"
        return res
    d = os.path.join(shared, ".gpufleet-validate")
    path = os.path.join(d, f"{job or 'marker'}.marker")
    if rank == 0:
        os.makedirs(d, exist_ok=True)
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(token)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _remove_stale(d)
    t0 = time.monotonic()
    while not os.path.exists(path) and time.monotonic() - t0 < wait_s:
        time.sleep(0.1)
    res["waited_s"] = round(time.monotonic() - t0, 2)
    if not os.path.exists(path):
        res["error"] = f"rank 0's marker {path} did not appear here within {wait_s:g} s"
        return res
    res["marker_sha256"] = sha256_file(path)
    return res


def _remove_stale(d: str) -> None:
    cutoff = time.time() - STALE_MARKER_S
    for name in os.listdir(d):
        p = os.path.join(d, name)
        try:
            if name.endswith(".marker") and os.stat(p).st_mtime < cutoff:
                os.remove(p)
        except OSError:
            pass


def _drop_cache(fd: int) -> bool:
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return True
    except (AttributeError, OSError):
        return False


def builtin(path: str, mb: int, seconds: float) -> common.Result:
    """Sequential write + fsync, sequential read, small-file create + fsync, random 4 KiB
    reads, each bounded by ``mb`` and ``seconds``."""
    d = os.path.join(path, ".gpufleet-validate", f"io-{os.getpid()}-{random.getrandbits(32):x}")
    os.makedirs(d)
    try:
        return _builtin(d, mb, seconds)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _builtin(d: str, mb: int, seconds: float) -> common.Result:
    buf = os.urandom(CHUNK)  # incompressible: a compressing file system cannot cheat
    seq = os.path.join(d, "seq.bin")
    fd = os.open(seq, os.O_WRONLY | os.O_CREAT, 0o600)
    written, t0 = 0, time.perf_counter()
    while written < mb << 20 and time.perf_counter() - t0 < seconds:
        written += os.write(fd, buf)
    os.fsync(fd)
    write_s = time.perf_counter() - t0
    dropped = _drop_cache(fd)
    os.close(fd)
    fd = os.open(seq, os.O_RDONLY)
    dropped = _drop_cache(fd) and dropped
    read, t0 = 0, time.perf_counter()
    while True:
        n = len(os.read(fd, CHUNK))
        if not n:
            break
        read += n
    read_s = time.perf_counter() - t0
    _drop_cache(fd)
    reads, t0, blocks = 0, time.perf_counter(), max(1, written // SMALL)
    while reads < 20000 and time.perf_counter() - t0 < seconds / 2:
        os.pread(fd, SMALL, random.randrange(blocks) * SMALL)
        reads += 1
    rand_s = time.perf_counter() - t0
    os.close(fd)
    small, t0, data = 0, time.perf_counter(), buf[:SMALL]
    while small < 5000 and time.perf_counter() - t0 < seconds / 2:
        fd = os.open(os.path.join(d, f"f{small}"), os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, data)
        os.fsync(fd)
        os.close(fd)
        small += 1
    small_s = time.perf_counter() - t0
    return {
        "tool": "builtin",
        "write_mbps": round(written / 1e6 / write_s, 1),
        "read_mbps": round(read / 1e6 / read_s, 1) if read_s > 0 else None,
        "read_cache_dropped": dropped,
        "rand_read_iops": round(reads / rand_s) if rand_s > 0 else None,
        "small_file_iops": round(small / small_s) if small_s > 0 else None,
        "bytes": written,
    }


def parse_fio(text: str) -> common.Result:
    """fio's ``--output-format=json``: bandwidth of a write or read job, IOPS of the rest."""
    doc = json.loads(text[text.find("{") :])
    out: common.Result = {}
    for job in doc.get("jobs", []):
        name = job.get("jobname", "")
        w, r = job.get("write", {}), job.get("read", {})
        if name == "seqwrite":
            out["write_mbps"] = round(w.get("bw_bytes", 0) / 1e6, 1)
        elif name == "seqread":
            out["read_mbps"] = round(r.get("bw_bytes", 0) / 1e6, 1)
        elif name == "randread":
            out["rand_read_iops"] = round(r.get("iops", 0))
        elif name == "randwrite":
            out["small_file_iops"] = round(w.get("iops", 0))
    return out


def fio(path: str, mb: int, seconds: float) -> common.Result:
    d = os.path.join(path, ".gpufleet-validate", f"fio-{os.getpid()}")
    os.makedirs(d, exist_ok=True)
    f = os.path.join(d, "fio.bin")
    rt = str(max(1, int(seconds)))
    base = ["fio", f"--filename={f}", f"--size={mb}M", "--output-format=json", "--group_reporting"]
    jobs = [
        ["--name=seqwrite", "--rw=write", "--bs=1M", "--end_fsync=1"],
        ["--name=seqread", "--rw=read", "--bs=1M", "--direct=1", f"--runtime={rt}"],
        ["--name=randread", "--rw=randread", "--bs=4k", "--direct=1", "--iodepth=16"],
        ["--name=randwrite", "--rw=randwrite", "--bs=4k", "--fsync=1"],
    ]
    out: common.Result = {"tool": "fio"}
    try:
        for extra in jobs:
            args = [*base, *extra]
            if "--runtime" not in " ".join(extra):
                args += [f"--runtime={rt}", "--time_based=0"]
            r = common.run(args, timeout=seconds * 4 + 60)
            if r["rc"] != 0:
                out["error"] = (r["err"] or r["error"]).strip()[-500:]
                return out
            out.update(parse_fio(r["out"]))
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return out


def collect(
    path: str,
    *,
    shared: str | None,
    token: str,
    rank: int,
    job: str,
    mb: int,
    seconds: float,
    use_fio: bool = True,
) -> common.Result:
    res: common.Result = {"path": path, **fs_type(path)}
    if shared:
        res["marker"] = common.guarded("marker", lambda: marker(shared, token, rank, job))
    if use_fio and common.which("fio"):
        res["io"] = common.guarded("fio", lambda: fio(path, mb, seconds))
        if "error" not in res["io"]:
            return res
        res["fio_error"] = res["io"]["error"]
    res["io"] = common.guarded("io", lambda: builtin(path, mb, seconds))
    return res
