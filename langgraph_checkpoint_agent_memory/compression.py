"""Compression of stored values, with no I/O: the one place the package compresses.

A value is a zstd frame made with the package's own dictionary (``values.zdict``, from
``benchmarks/dictionary.py``): a chat message of 330 bytes shrinks to about 150 (280 with plain
zstd). Opening is bounded (:data:`BOUND`), so a crafted row gives a DamagedValueError, never a
process out of memory. A compressor costs 60 to 300 µs to build and serves one thread at a
time: they are pooled, not kept per thread (LangGraph's writer threads live for one invoke).
"""

from __future__ import annotations

import functools
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
#: The dictionary every frame is made with. Frozen: frames do not name it, so values written
#: with it open only with it; a better one would come beside it, with a marker of its own.
DICTIONARY = Path(__file__).with_name("values.zdict")
#: Compressors and decompressors not in use (``list.pop`` and ``append`` are atomic).
_compressors: list[Any] = []
_decompressors: list[Any] = []


@functools.cache
def _zstd_dictionary() -> Any:
    """The dictionary, read and digested once (a race digests it twice, harmlessly)."""
    import zstandard

    dictionary = zstandard.ZstdCompressionDict(DICTIONARY.read_bytes())
    dictionary.precompute_compress(level=LEVEL)
    return dictionary


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
    try:
        compressor = _compressors.pop()
    except IndexError:  # none free
        import zstandard

        compressor = zstandard.ZstdCompressor(
            level=LEVEL, dict_data=_zstd_dictionary(), write_checksum=False, write_dict_id=False
        )
    try:
        frame: bytes = compressor.compress(data)
    finally:
        _compressors.append(compressor)
    return frame if len(frame) < len(data) else None


def unpack(frame: bytes, what: str) -> bytes:
    """The value :func:`pack` made ``frame`` of, or :class:`DamagedValueError` (naming
    ``what``) when ``frame`` is not a whole frame stating a size of at most :data:`BOUND`."""
    import zstandard

    try:
        size = zstandard.frame_content_size(frame)
        if size < 0 or size > BOUND:
            raise DamagedValueError(
                f"{what} is damaged: its compressed frame "
                + ("states no size" if size < 0 else f"claims {size:,} bytes")
                + f" (at most {BOUND:,} are ever written)"
            )
        try:
            decompressor = _decompressors.pop()
        except IndexError:  # none free
            decompressor = zstandard.ZstdDecompressor(dict_data=_zstd_dictionary())
        try:
            data: bytes = decompressor.decompress(frame, allow_extra_data=False)
        finally:
            _decompressors.append(decompressor)
    except zstandard.ZstdError as exc:
        raise DamagedValueError(
            f"{what} is damaged: not a whole compressed frame ({exc})"
        ) from None
    return data


def unpack_zlib(data: bytes, what: str) -> bytes:
    """A zlib stream (sealed values compressed before this module) opened, or
    :class:`DamagedValueError` when it is not whole or expands beyond :data:`BOUND` bytes."""
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
