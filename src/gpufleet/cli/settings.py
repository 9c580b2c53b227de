"""Moved to ``gpufleet.base.settings`` (issue 27: the lean client, below the CLI, reads them
too). This alias stays only while branches written before the move land; import
``gpufleet.base.settings``."""

from gpufleet.base.settings import (
    KEYS,
    Settings,
    SettingsError,
    config_path,
    read_file,
    resolve,
    token,
)

__all__ = ["KEYS", "Settings", "SettingsError", "config_path", "read_file", "resolve", "token"]
