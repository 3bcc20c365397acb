"""The file formats `dlkit sample` writes indices in (no NumPy: the CLI's --help reads it)."""

from __future__ import annotations

import enum


class OutputFormat(str, enum.Enum):
    TXT = "txt"
    NPY = "npy"
    BIN = "bin"
