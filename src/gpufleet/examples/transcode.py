"""A transcode job: ffmpeg encodes a generated source (lavfi's ``testsrc2``, so no media file is
needed) to H.264, with ``h264_nvenc`` when the job was given a GPU with NVENC
(``--gres=nvenc:1``: the agent tells it ``NVIDIA_DRIVER_CAPABILITIES=…,video``) on a host with
a real NVIDIA driver and its encoder opens, ``libx264`` on the CPU otherwise, and says which
and why. Its frames/s
are a job metric (``transcode_fps`` in ``$GPUFLEET_METRICS_FILE``: ``gpufleet show JOB``, and
``gpufleet_job_metric`` on /metrics), and go to the log as one JSON line as well.

    gpufleet submit --gres=nvenc:1 -- python3 -m gpufleet.examples.transcode --seconds 10
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from gpufleet.examples.given import Given, nvidia_gpu


def has_encoder(ffmpeg: str, name: str) -> bool:
    listed = subprocess.run(
        [ffmpeg, "-hide_banner", "-encoders"], capture_output=True, text=True, check=False
    ).stdout
    return any(line.split()[1:2] == [name] for line in listed.splitlines())


def nvenc_opens(ffmpeg: str) -> str:
    """ "" when NVENC encodes one frame on the job's GPU, else ffmpeg's first error line.
    ``video`` is given for decoders too (``--gres=nvdec:1`` may land on an H100, which has
    NVDEC and no NVENC): the GPU itself says whether it has an encoder."""
    source = "testsrc2=size=256x256:rate=1:duration=1"
    probe = [ffmpeg, "-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i", source,
             "-c:v", "h264_nvenc", "-f", "null", "-"]  # fmt: skip
    done = subprocess.run(probe, capture_output=True, text=True, check=False)
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    return "" if done.returncode == 0 else (errors[0] if errors else f"exit {done.returncode}")


def choose_encoder(ffmpeg: str, given: Given) -> tuple[str, str]:
    """(encoder, why): NVENC only on a GPU the job was given with the video capability, whose
    encoder opens."""
    if not given.gpu:
        return "libx264", given.reason
    if not has_encoder(ffmpeg, "h264_nvenc"):
        return "libx264", f"{given.reason}, but {ffmpeg} has no h264_nvenc encoder"
    failed = nvenc_opens(ffmpeg)
    if failed:
        return "libx264", f"{given.reason}, but NVENC does not open on it ({failed})"
    return "h264_nvenc", given.reason


def ffmpeg_command(ffmpeg: str, encoder: str, a: argparse.Namespace) -> list[str]:
    source = f"testsrc2=size={a.size}:rate={a.rate}:duration={a.seconds}"
    preset = ["-preset", "p4"] if encoder == "h264_nvenc" else ["-preset", "veryfast"]
    return [
        ffmpeg, "-hide_banner", "-nostats", "-loglevel", "error", "-y",
        "-f", "lavfi", "-i", source, "-c:v", encoder, *preset, "-pix_fmt", "yuv420p",
        "-progress", "pipe:1", a.out,
    ]  # fmt: skip


def frames_done(progress: str) -> int:
    """The last ``frame=N`` of ffmpeg's -progress output."""
    counts = [line.split("=", 1)[1] for line in progress.splitlines() if line.startswith("frame=")]
    return int(counts[-1]) if counts else 0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="transcode", description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=10.0, help="length of the source (s)")
    p.add_argument("--size", default="1280x720", help="WxH of the source")
    p.add_argument("--rate", type=int, default=30, help="frames per second of the source")
    p.add_argument("--out", default="transcode.mp4", help="the output file (submit directory)")
    a = p.parse_args(argv)
    if a.seconds <= 0 or a.rate <= 0:
        p.error("--seconds and --rate must be positive")
    return a


def main(argv: Sequence[str] | None = None) -> int:
    a = parse_args(argv)
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        print("transcode: ffmpeg is not on PATH", file=sys.stderr)
        return 2
    encoder, why = choose_encoder(ffmpeg, nvidia_gpu(os.environ, "video"))
    print(f"transcode: {encoder}: {why}", flush=True)
    start = time.monotonic()
    done = subprocess.run(ffmpeg_command(ffmpeg, encoder, a), capture_output=True, text=True)
    seconds = time.monotonic() - start
    if done.returncode != 0:
        print(f"transcode: ffmpeg failed ({done.returncode}): {done.stderr}", file=sys.stderr)
        return 1
    frames = frames_done(done.stdout)
    fps = frames / seconds if seconds > 0 else 0.0
    print(f"transcode: {frames} frames in {seconds:.2f} s, {fps:.1f} frames/s -> {a.out}")
    row = {"metric": "transcode_fps", "value": round(fps, 2), "encoder": encoder,
           "frames": frames, "seconds": round(seconds, 3), "output": str(Path(a.out))}  # fmt: skip
    print(json.dumps(row), flush=True)
    nvenc = 1 if encoder == "h264_nvenc" else 0
    report({"transcode_fps": round(fps, 2), "transcode_frames": frames, "nvenc": nvenc})
    return 0


def report(metrics: dict[str, float]) -> None:
    """The job's metrics to its agent (``$GPUFLEET_METRICS_FILE``, one ``name value`` a line;
    a new file renamed over the old, so the agent never reads half of one); none outside a
    gpufleet job."""
    path = os.environ.get("GPUFLEET_METRICS_FILE")
    if not path:
        return
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.writelines(f"{k} {v}\n" for k, v in metrics.items())
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
