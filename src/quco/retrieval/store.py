"""Passage storage next to an index: one UTF-8 blob plus an offsets array, memory-mapped on load.

Loading costs two ``open`` calls whatever the corpus size (no JSON parsing), and a passage is decoded only
when a search returns it.
"""

from __future__ import annotations

import mmap
import shutil
from array import array
from pathlib import Path
from types import TracebackType
from typing import IO

import numpy as np

BLOB_NAME = "passages.bin"
OFFSETS_NAME = "passages.offsets.npy"
_FIELDS = 3  # id, title, text


def write_npy_header(fh: IO[bytes], dtype: np.dtype, length: int) -> None:
    """The header of a 1-D ``.npy`` array of ``length`` items; the caller writes the raw items after it."""
    np.lib.format.write_array_header_1_0(
        fh,
        {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": (length,)},
    )


class PassageStoreWriter:
    """Appends passages to ``passages.bin``; :meth:`close` writes the offsets that delimit them.

    The offsets go to a side file as they come (8 bytes each, three per passage) and become the ``.npy``
    array on close, so memory does not grow with the corpus.
    """

    _FLUSH = 1 << 16

    def __init__(self, directory: Path) -> None:
        self._dir = directory
        self._fh = (directory / BLOB_NAME).open("wb")
        self._part = directory / (OFFSETS_NAME + ".part")
        self._offsets_fh = self._part.open("wb")
        self._offsets = array("q", [0])
        self._n_offsets = 0
        self._pos = 0
        self.count = 0

    def add(self, pid: str, title: str, text: str) -> None:
        for value in (pid, title, text):
            data = value.encode("utf-8")
            self._fh.write(data)
            self._pos += len(data)
            self._offsets.append(self._pos)
        self.count += 1
        if len(self._offsets) >= self._FLUSH:
            self._flush_offsets()

    def _flush_offsets(self) -> None:
        self._offsets.tofile(self._offsets_fh)
        self._n_offsets += len(self._offsets)
        self._offsets = array("q")

    def close(self) -> None:
        if self._fh.closed:
            return
        self._fh.close()
        self._flush_offsets()
        self._offsets_fh.close()
        with (self._dir / OFFSETS_NAME).open("wb") as out, self._part.open("rb") as part:
            write_npy_header(out, np.dtype(np.int64), self._n_offsets)
            shutil.copyfileobj(part, out, 1 << 22)
        self._part.unlink()

    def __enter__(self) -> PassageStoreWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class PassageStore:
    """Read-only view of the passages of one index, by position in the index."""

    def __init__(self, directory: Path) -> None:
        self._offsets = np.load(directory / OFFSETS_NAME, mmap_mode="r")
        if self._offsets.ndim != 1 or (len(self._offsets) - 1) % _FIELDS:
            raise ValueError(f"{directory / OFFSETS_NAME} has an invalid shape {self._offsets.shape}")
        blob_path = directory / BLOB_NAME
        size = blob_path.stat().st_size
        if size != int(self._offsets[-1]):
            raise ValueError(
                f"{blob_path} holds {size} bytes but its offsets end at {int(self._offsets[-1])}"
            )
        if size == 0:
            self._blob: mmap.mmap | bytes = b""
        else:
            with blob_path.open("rb") as fh:
                self._blob = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)

    def __len__(self) -> int:
        return (len(self._offsets) - 1) // _FIELDS

    def _field(self, j: int) -> str:
        start, end = int(self._offsets[j]), int(self._offsets[j + 1])
        return self._blob[start:end].decode("utf-8")

    def get(self, index: int) -> tuple[str, str, str]:
        """(id, title, text) of the passage at ``index``."""
        if not 0 <= index < len(self):
            raise IndexError(f"passage {index} out of range 0..{len(self) - 1}")
        base = index * _FIELDS
        return self._field(base), self._field(base + 1), self._field(base + 2)
