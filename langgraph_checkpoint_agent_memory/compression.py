"""Compression of stored values, with no I/O: the one place the package compresses.

A value is a zstd frame made with the package's own dictionary (``values.zdict``, trained on
what LangGraph's serde writes: checkpoint bodies, messages, pending writes; see
``benchmarks/dictionary.py``), so even a value of a few hundred bytes shrinks: a checkpoint
body of 525 bytes to about 125, a chat message of 330 to about 150, where plain zstd gives
260 and 280. Values shorter than :data:`FLOOR` stay raw, and so do values longer than
:data:`BOUND` or that compression would not make smaller: the caller marks what it packed
(the checkpoint saver by a type prefix, the cipher by its marker byte).

Opening is bounded: a frame must state its content size, and one that states more than
:data:`BOUND` is refused before anything is decompressed, so a crafted row (an expansion
bomb, a cut frame, garbage) gives :class:`~.errors.DamagedValueError`, never a process out of
memory.

``zstandard`` is imported on first use, and its (compressor, decompressor) pair is kept per
thread: neither may be shared by two threads at once.
"""

from __future__ import annotations

import threading
import zlib
from pathlib import Path
from typing import Any

from langgraph_checkpoint_agent_memory.errors import DamagedValueError

#: Values shorter than this stay raw: a frame's header would eat what compression saves.
FLOOR = 48
#: The most a value may expand to: longer values stay raw, and a frame claiming more is refused.
BOUND = 64 * 1024 * 1024
#: The zstd level: level 3 is zstd's default, 2x faster than zlib's for the same ratio here.
LEVEL = 3
#: The dictionary every frame is made with.
DICTIONARY = Path(__file__).with_name("values.zdict")
_local = threading.local()


def _codecs() -> tuple[Any, Any]:
    """This thread's zstd compressor and decompressor, built with the dictionary."""
    found: tuple[Any, Any] | None = getattr(_local, "codecs", None)
    if found is None:
        import zstandard

        dictionary = zstandard.ZstdCompressionDict(DICTIONARY.read_bytes())
        compressor = zstandard.ZstdCompressor(
            level=LEVEL, dict_data=dictionary, write_checksum=False, write_dict_id=False
        )
        found = (compressor, zstandard.ZstdDecompressor(dict_data=dictionary))
        _local.codecs = found
    return found


def pack(data: bytes) -> bytes | None:
    """``data`` as a zstd frame, or ``None`` when it stays raw (shorter than :data:`FLOOR`,
    longer than :data:`BOUND`, or no smaller compressed).

    Example:
        >>> frame = pack(b"a value that repeats, a value that repeats, a value that repeats")
        >>> unpack(frame, "an example")
        b'a value that repeats, a value that repeats, a value that repeats'
        >>> pack(b"short") is None
        True
    """
    if not FLOOR <= len(data) <= BOUND:
        return None
    frame: bytes = _codecs()[0].compress(data)
    return frame if len(frame) < len(data) else None


def unpack(frame: bytes, what: str) -> bytes:
    """The value :func:`pack` made ``frame`` of.

    Args:
        frame: A zstd frame stating its content size, at most :data:`BOUND`.
        what: The value named in the error.

    Raises:
        DamagedValueError: ``frame`` is not a whole frame of at most :data:`BOUND` bytes.
    """
    import zstandard

    try:
        size = zstandard.frame_content_size(frame)
        if size < 0 or size > BOUND:
            raise DamagedValueError(
                f"{what} is damaged: its compressed frame "
                + ("states no size" if size < 0 else f"claims {size:,} bytes")
                + f" (at most {BOUND:,} are ever written)"
            )
        data: bytes = _codecs()[1].decompress(frame, allow_extra_data=False)
    except zstandard.ZstdError as exc:
        raise DamagedValueError(
            f"{what} is damaged: not a whole compressed frame ({exc})"
        ) from None
    return data


def unpack_zlib(data: bytes, what: str) -> bytes:
    """A zlib stream (what sealed values of format 2 hold when compressed before this module),
    opened at most :data:`BOUND` bytes long.

    Raises:
        DamagedValueError: ``data`` is not a whole zlib stream of at most :data:`BOUND` bytes.
    """
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(data, BOUND)
    except zlib.error as exc:
        raise DamagedValueError(f"{what} is damaged: not a whole zlib stream ({exc})") from None
    if inflater.unconsumed_tail or not inflater.eof:
        raise DamagedValueError(
            f"{what} is damaged: its zlib stream is cut short or expands beyond {BOUND:,} bytes"
        )
    return out
