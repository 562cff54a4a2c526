"""Passage storage next to an index: one UTF-8 blob plus an offsets array, memory-mapped on load.

Loading costs two ``open`` calls whatever the corpus size (no JSON parsing), and a passage is decoded only
when a search returns it.
"""

from __future__ import annotations

import mmap
from pathlib import Path
from types import TracebackType

import numpy as np

BLOB_NAME = "passages.bin"
OFFSETS_NAME = "passages.offsets.npy"
_FIELDS = 3  # id, title, text


class PassageStoreWriter:
    """Appends passages to ``passages.bin``; :meth:`close` writes the offsets that delimit them."""

    def __init__(self, directory: Path) -> None:
        self._dir = directory
        self._fh = (directory / BLOB_NAME).open("wb")
        self._offsets: list[int] = [0]
        self._pos = 0
        self.count = 0

    def add(self, pid: str, title: str, text: str) -> None:
        for value in (pid, title, text):
            data = value.encode("utf-8")
            self._fh.write(data)
            self._pos += len(data)
            self._offsets.append(self._pos)
        self.count += 1

    def close(self) -> None:
        if self._fh.closed:
            return
        self._fh.close()
        np.save(self._dir / OFFSETS_NAME, np.asarray(self._offsets, dtype=np.int64))

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
