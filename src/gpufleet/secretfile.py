"""Moved to ``gpufleet.base.secretfile`` (issue 27). This alias stays only while branches
written before the move land; import ``gpufleet.base.secretfile``."""

from gpufleet.base.secretfile import (
    PRIVATE_UMASK,
    SecretFileError,
    private_dir,
    private_umask,
    read_secret,
    write_secret,
)

__all__ = [
    "PRIVATE_UMASK",
    "SecretFileError",
    "private_dir",
    "private_umask",
    "read_secret",
    "write_secret",
]
