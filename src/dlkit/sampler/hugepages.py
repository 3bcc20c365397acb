"""Huge-page memory for what a batch reads at random: the graph and the columns.

A batch reads tens of thousands of random cache lines spread over the whole database (each
visited row's offsets, parents, child times and ids; each cell's value and validity bit). The
database is memory-mapped in 4 KiB pages, so nearly every such read also misses the TLB and
walks the page tables, which on a virtual machine costs more than the read itself. Copied into
anonymous memory that the kernel backs with 2 MiB transparent huge pages, the same reads
mostly hit the TLB, and batches build faster (docs/batch_format.md, section 9). The sampler
also builds its edge records there (``dlkit.sampler.graph``).

The price is memory: the copies take their size in RAM in every process, where the memory
map shares the page cache. ``use_huge_pages`` decides: always, never, or (the default) when
the kernel offers transparent huge pages, this process is the only rank of its job on the
machine (several local ranks would each hold a private copy of the same database: they share
the memory map's page cache instead), and the copies fit in a quarter of the physical memory.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import numpy as np

from dlkit.errors import InvalidArgumentError

THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")
SHMEM_THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
MEMORY_SHARE = 4  # automatic copies may take up to 1/MEMORY_SHARE of the physical memory


def _thp_offers(setting_file: Path, modes: tuple[str, ...]) -> bool:
    """Whether the kernel's THP setting in ``setting_file`` selects one of ``modes`` (the
    selected one is bracketed) and ``MADV_HUGEPAGE`` exists."""
    if not hasattr(mmap, "MADV_HUGEPAGE"):
        return False
    try:
        setting = setting_file.read_text()
    except OSError:
        return False
    return any(f"[{mode}]" in setting for mode in modes)


def huge_pages_available() -> bool:
    """Whether this kernel backs ``MADV_HUGEPAGE`` memory with transparent huge pages."""
    return _thp_offers(THP_SETTING, ("always", "madvise"))


def shared_huge_pages_available() -> bool:
    """Whether shared memory (tmpfs, where ``dlkit.sampler.shared`` puts its segments) is
    backed by huge pages when advised."""
    return _thp_offers(SHMEM_THP_SETTING, ("always", "within_size", "advise", "force"))


def physical_memory() -> int:
    """Bytes of physical memory (0 when the platform does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


def memory_path(setting: bool | None, total_bytes: int, local_ranks: int = 1) -> str:
    """Where the sampler reads the graph and the values: ``"mmap"`` (the database's memory
    map), ``"private"`` (huge-page copies of this process's own) or ``"shared"`` (one
    huge-page segment per machine, shared by the job's ``local_ranks`` on it:
    ``dlkit.sampler.shared``). ``setting`` True always copies, False never, None when it pays
    (``use_huge_pages``)."""
    copy = use_huge_pages(setting, total_bytes, local_ranks)
    if not copy:
        return "mmap"
    return "shared" if local_ranks > 1 else "private"


def use_huge_pages(setting: bool | None, total_bytes: int, local_copies: int = 1) -> bool:
    """Resolve a ``huge_pages`` setting: True/False as given, None automatically: copies of
    ``total_bytes`` when the kernel gives huge pages and they fit in a quarter of the RAM;
    with several local ranks (``local_copies``), which share one copy per machine, only
    where shared memory gets huge pages too (else the shared segment would cost memory and
    win little: the ranks share the memory map's page cache instead)."""
    if setting is not None and not isinstance(setting, bool):
        raise InvalidArgumentError(f"huge_pages must be True, False or None (automatic), "
                                   f"got {setting!r}")
    if setting is not None:
        return setting
    if not huge_pages_available():
        return False
    if local_copies > 1 and not shared_huge_pages_available():
        return False
    return 0 < total_bytes <= physical_memory() // MEMORY_SHARE


def huge_page_empty(shape: int | tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
    """A writable, uninitialised C-contiguous array in anonymous memory advised for huge pages.

    Where the advice is unsupported the array is still correct, only in ordinary pages.
    """
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    count = int(np.prod(shape, dtype=np.int64))
    buffer = mmap.mmap(-1, max(count * np.dtype(dtype).itemsize, 1),
                       flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            buffer.madvise(mmap.MADV_HUGEPAGE)
        except OSError:
            pass  # the kernel declines: ordinary pages, same contents
    return np.frombuffer(buffer, dtype=dtype, count=count).reshape(shape)


def huge_page_copy(array: np.ndarray) -> np.ndarray:
    """A read-only copy of the 1-D ``array`` in anonymous memory advised for huge pages."""
    copy = huge_page_empty(array.shape[0], array.dtype)
    copy[...] = array
    copy.setflags(write=False)
    return copy
