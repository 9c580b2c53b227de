"""A render job: the frames of an animation as an array, each task rendering its share with
Blender in background mode (Cycles), then a gather job, through ``--dependency=afterok``, that
checks every frame is there and assembles them into a video with ffmpeg. No .blend file: the
scene is Blender's factory startup (a cube, a camera, a light) with the cube's turn keyframed
by a Python expression, at a small size and few samples (``--size``, ``--samples``).

    #SBATCH --array=1-8 -c 2
    python3 -m gpufleet.examples.render frames --frames 24      # each task: its 3 frames
    python3 -m gpufleet.examples.render gather --frames 24      # after the array: render.mp4

Cycles renders on the job's GPU (OptiX or CUDA, whichever this Blender has a device of) only
when the job was given a real NVIDIA GPU, and on the CPU otherwise, with the job's CPUs
(``-t $SLURM_CPUS_PER_TASK``); the log says which and why. Frames go to
``frames/frame_NNNN.png`` in the submit directory.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from gpufleet.examples.given import nvidia_gpu

# the scene, set up in Blender's own Python before the render: format, size, samples, and a
# cube that turns once over the frames
SCENE = """\
import bpy, math
s = bpy.context.scene
s.render.engine = "CYCLES"
s.cycles.samples = {samples}
s.cycles.use_denoising = False
s.render.resolution_x, s.render.resolution_y, s.render.resolution_percentage = {w}, {h}, 100
s.render.image_settings.file_format = "PNG"
s.frame_start, s.frame_end = 1, {frames}
cube = bpy.data.objects["Cube"]
cube.rotation_euler = (0.3, 0.0, 0.0)
cube.keyframe_insert("rotation_euler", frame=1)
cube.rotation_euler = (0.3, 0.0, 2 * math.pi)
cube.keyframe_insert("rotation_euler", frame={frames} + 1)
"""

# on a GPU the job was given: OptiX or CUDA, whichever this Blender was built with and finds
# a device of (Debian's 3.4 has CUDA and HIP, no OptiX), else the CPU, saying so
ON_GPU = """p = bpy.context.preferences.addons["cycles"].preferences
kinds = [k[0] for k in p.get_device_types(bpy.context)]
p.get_devices()
found = [k for k in ("OPTIX", "CUDA") if k in kinds and any(d.type == k for d in p.devices)]
if found:
    p.compute_device_type = found[0]
    for d in p.devices:
        d.use = d.type == found[0]
    s.cycles.device = "GPU"
    print("render: Cycles on " + found[0])
else:
    print("render: Cycles on the CPU: this Blender finds no OPTIX or CUDA device (built with "
          + ", ".join(kinds) + ")")
"""


def my_frames(env: Mapping[str, str], frames: int) -> list[int]:
    """This array task's frames of 1..frames: the tasks split them in contiguous runs, in the
    order of their indices (SLURM_ARRAY_TASK_ID from _MIN by _STEP, _COUNT of them)."""
    try:
        index = int(env["SLURM_ARRAY_TASK_ID"])
        low, step = int(env["SLURM_ARRAY_TASK_MIN"]), int(env.get("SLURM_ARRAY_TASK_STEP", "1"))
        count = int(env["SLURM_ARRAY_TASK_COUNT"])
    except (KeyError, ValueError) as e:
        raise SystemExit(f"render: not an array task (SLURM_ARRAY_TASK_*: {e})") from None
    position = (index - low) // max(step, 1)
    start, end = frames * position // count, frames * (position + 1) // count
    return list(range(start + 1, end + 1))


def blender_command(blender: str, a: argparse.Namespace, frames: list[int], gpu: bool) -> list[str]:
    w, h = a.size.split("x")
    scene = SCENE.format(samples=a.samples, w=w, h=h, frames=a.frames) + (ON_GPU if gpu else "")
    out = str(Path(a.out).resolve() / "frame_####")
    threads = os.environ.get("SLURM_CPUS_PER_TASK", "0")  # 0: Blender's own choice
    return [
        blender, "-b", "--factory-startup", "--python-expr", scene, "-E", "CYCLES",
        "-t", threads, "-o", out, "-F", "PNG", "-f", ",".join(map(str, frames)),
    ]  # fmt: skip


def render_frames(a: argparse.Namespace) -> int:
    frames = my_frames(os.environ, a.frames)
    if not frames:
        print("render: this task has no frames (more tasks than frames)")
        return 0
    blender = shutil.which("blender")
    if blender is None:
        print("render: blender is not on PATH", file=sys.stderr)
        return 2
    given = nvidia_gpu(os.environ, "compute")
    where = "the job's GPU" if given.gpu else "the CPU"
    print(f"render: frames {frames[0]}-{frames[-1]} on {where}: {given.reason}", flush=True)
    done = subprocess.run(blender_command(blender, a, frames, given.gpu), text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    saved = [x for x in done.stdout.splitlines() if x.startswith(("Saved:", "render:"))]
    print("\n".join(saved), flush=True)
    missing = [f for f in frames if not frame_path(a.out, f).is_file()]
    if done.returncode != 0 or missing:
        print(f"render: blender exited {done.returncode}, frames missing: {missing}\n"
              f"{done.stdout[-4000:]}", file=sys.stderr)  # fmt: skip
        return 1
    return 0


def frame_path(out: str, frame: int) -> Path:
    return Path(out) / f"frame_{frame:04d}.png"


def gather(a: argparse.Namespace) -> int:
    missing = [f for f in range(1, a.frames + 1) if not frame_path(a.out, f).is_file()]
    if missing:
        print(f"gather: {len(missing)} of {a.frames} frames missing: {missing}", file=sys.stderr)
        return 1
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        print("gather: ffmpeg is not on PATH", file=sys.stderr)
        return 2
    pattern = str(Path(a.out) / "frame_%04d.png")
    cmd = [ffmpeg, "-hide_banner", "-loglevel", "error", "-y", "-framerate", str(a.fps),
           "-i", pattern, "-c:v", "libx264", "-pix_fmt", "yuv420p", a.video]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        print(f"gather: ffmpeg failed ({done.returncode}): {done.stderr}", file=sys.stderr)
        return 1
    print(f"gather: {a.frames} frames -> {a.video}")
    print(json.dumps({"metric": "render_frames", "value": a.frames, "video": a.video}), flush=True)
    return 0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="render", description=__doc__.split("\n\n")[0])
    p.add_argument("step", choices=["frames", "gather"], help="an array task's, or the gather's")
    p.add_argument("--frames", type=int, required=True, help="frames of the animation (1..N)")
    p.add_argument("--size", default="160x120", help="WxH of a frame")
    p.add_argument("--samples", type=int, default=8, help="Cycles samples per pixel")
    p.add_argument("--out", default="frames", help="the frames' directory")
    p.add_argument("--video", default="render.mp4", help="the gather's video")
    p.add_argument("--fps", type=int, default=24, help="the video's frame rate")
    a = p.parse_args(argv)
    w, _, h = a.size.partition("x")
    problems = [
        *(["--frames must be 1 to 9999"] if not 1 <= a.frames <= 9999 else []),
        *(["--samples must be positive"] if a.samples < 1 else []),
        *(["--fps must be positive"] if a.fps < 1 else []),
        *([f"--size must be WxH, not {a.size!r}"] if not (w.isdigit() and h.isdigit()) else []),
    ]
    if problems:
        p.error("; ".join(problems))
    return a


def main(argv: Sequence[str] | None = None) -> int:
    a = parse_args(argv)
    if a.step == "gather":
        return gather(a)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    return render_frames(a)


if __name__ == "__main__":
    sys.exit(main())
