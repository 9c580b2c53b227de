"""The render and transcode examples' choices: a GPU path only for what the job was given on a
host with a real driver, and an array's frames split without gaps or overlaps."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from gpufleet.examples.given import nvidia_gpu
from gpufleet.examples.render import blender_command, my_frames
from gpufleet.examples.render import parse_args as render_args
from gpufleet.examples.transcode import choose_encoder, frames_done, has_encoder

VIDEO_GPU = {"CUDA_VISIBLE_DEVICES": "0", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility,video"}


@pytest.fixture
def driver(tmp_path: Path) -> Path:
    (tmp_path / "nvidiactl").touch()  # a host with an NVIDIA driver has this device node
    return tmp_path


def test_a_gpu_with_video_on_a_driver_host_is_given(driver: Path) -> None:
    g = nvidia_gpu(VIDEO_GPU, "video", dev=driver)
    assert g.gpu and "GPU 0" in g.reason
    assert nvidia_gpu({**VIDEO_GPU, "NVIDIA_DRIVER_CAPABILITIES": "all"}, "video", driver).gpu


@pytest.mark.parametrize(
    ("env", "why"),
    [
        ({}, "no GPU"),
        ({**VIDEO_GPU, "CUDA_VISIBLE_DEVICES": ""}, "no GPU"),
        ({**VIDEO_GPU, "CUDA_VISIBLE_DEVICES": "NoDevFiles"}, "no GPU"),
        (
            {**VIDEO_GPU, "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"},
            "without the driver's video",
        ),
        ({"CUDA_VISIBLE_DEVICES": "1"}, "NVIDIA_DRIVER_CAPABILITIES=unset"),
    ],
)
def test_what_the_job_was_not_given_is_not_used(
    env: dict[str, str], why: str, driver: Path
) -> None:
    g = nvidia_gpu(env, "video", dev=driver)
    assert not g.gpu and why in g.reason


def test_simulated_gpus_have_no_driver(tmp_path: Path) -> None:
    g = nvidia_gpu(VIDEO_GPU, "video", dev=tmp_path)
    assert not g.gpu and "nvidiactl is missing" in g.reason


def test_the_encoder_follows_what_was_given(driver: Path) -> None:
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        pytest.skip("no ffmpeg")
    no_driver = driver / "empty"
    no_driver.mkdir()
    assert choose_encoder(ffmpeg, nvidia_gpu(VIDEO_GPU, "video", no_driver))[0] == "libx264"
    enc, why = choose_encoder(ffmpeg, nvidia_gpu(VIDEO_GPU, "video", driver))
    assert enc == "h264_nvenc" or "no h264_nvenc encoder" in why or "NVENC does not open" in why


@pytest.mark.skipif(Path("/dev/nvidiactl").exists(), reason="a real driver: NVENC may open")
def test_a_gpu_whose_encoder_does_not_open_gets_libx264(driver: Path) -> None:
    """Told a GPU with video (as an NVDEC job on an H100 is) where NVENC does not open: here,
    no driver at all; ffmpeg's own error is the reason."""
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None or not has_encoder(ffmpeg, "h264_nvenc"):
        pytest.skip("no ffmpeg with h264_nvenc")
    enc, why = choose_encoder(ffmpeg, nvidia_gpu(VIDEO_GPU, "video", driver))
    assert enc == "libx264" and "NVENC does not open on it (" in why, why


def test_frames_done_reads_the_last_progress_block() -> None:
    assert frames_done("frame=10\nfps=0\nprogress=continue\nframe=60\nprogress=end\n") == 60
    assert frames_done("") == 0


@pytest.mark.parametrize(
    ("low", "step", "count", "frames"), [(1, 1, 8, 24), (0, 2, 5, 7), (1, 1, 4, 2)]
)
def test_an_arrays_tasks_split_the_frames_exactly(
    low: int, step: int, count: int, frames: int
) -> None:
    got: list[int] = []
    for i in range(count):
        env = {
            "SLURM_ARRAY_TASK_ID": str(low + i * step),
            "SLURM_ARRAY_TASK_MIN": str(low),
            "SLURM_ARRAY_TASK_STEP": str(step),
            "SLURM_ARRAY_TASK_COUNT": str(count),
        }
        mine = my_frames(env, frames)
        assert mine == sorted(mine)
        got += mine
    assert got == list(range(1, frames + 1))


def test_a_task_outside_an_array_is_told(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit, match="not an array task"):
        my_frames({}, 4)


def test_bad_render_options_are_all_named(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        render_args(["frames", "--frames", "0", "--samples", "0", "--size", "big"])
    err = capsys.readouterr().err
    assert "--frames must be" in err and "--samples must be" in err and "--size must be" in err


@pytest.mark.skipif(not shutil.which("blender"), reason="Debian's blender is not installed")
def test_blender_told_of_a_gpu_it_has_no_device_for_renders_on_the_cpu(tmp_path: Path) -> None:
    """The GPU branch of the render, run for real on this host: Blender finds no OptiX or CUDA
    device here, so it says so and renders the frame on the CPU rather than failing."""
    blender = shutil.which("blender")
    assert blender is not None
    a = render_args(["frames", "--frames", "2", "--size", "32x24", "--samples", "1",
                     "--out", str(tmp_path / "frames")])  # fmt: skip
    done = subprocess.run(blender_command(blender, a, [2], gpu=True), capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:]
    said = [x for x in done.stdout.splitlines() if x.startswith("render: Cycles on ")]
    if said != ["render: Cycles on CUDA"] and said != ["render: Cycles on OPTIX"]:
        assert len(said) == 1 and "finds no OPTIX or CUDA device" in said[0], done.stdout[-2000:]
    assert (tmp_path / "frames" / "frame_0002.png").is_file()
