"""The errors zarrext raises about stored data: which array, which chunk, which codec.

A codec's own error (numcodecs' ``RuntimeError("Zstd decompression error")``, zarr's
``crc32c`` mismatch, a zarrext codec's ``ValueError``) says what is wrong with some
bytes, never whose bytes they are: codecs are not told the chunk they decode. The
pipeline and the jobs that decode chunks know; they raise :class:`ChunkDecodeError`
``from`` the codec's error, so the cause stays on the traceback.

This module imports nothing of zarrext: codecs, runtime and jobs all use it.
"""

from __future__ import annotations

import ast
import gzip
import re
import struct
import types
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from zarrext._text import counted

__all__ = [
    "DECODE_ERRORS",
    "ChunkDecodeError",
    "DamagedChunksError",
    "FillValueError",
    "codec_name",
    "error_text",
    "failing_codecs",
    "hex_bytes",
    "naming_chunk",
]

DECODE_ERRORS: tuple[type[Exception], ...] = (
    ValueError, RuntimeError, TypeError, IndexError, KeyError, ArithmeticError,
    AssertionError, EOFError, struct.error, zlib.error, gzip.BadGzipFile,
)
"""What codecs raise on bytes they cannot decode: the ``ValueError`` family, and
numcodecs' zstd a ``RuntimeError``, gzip ``BadGzipFile``, ``EOFError`` or
``zlib.error``, others ``TypeError``, ``IndexError``, ``OverflowError`` or
``struct.error``. Not ``MemoryError``, and no other ``OSError``: that is the
store's (a chunk that cannot be read is not a damaged chunk)."""


class FillValueError(ValueError, TypeError):
    """A ``fill_value`` in metadata that its data type cannot hold.

    A ``ValueError``, and a ``TypeError`` as well: zarr-python's data types refuse
    a fill value with ``TypeError``, and callers that catch that keep working.
    """


class ChunkDecodeError(ValueError):
    """A stored chunk that its codecs cannot decode.

    Attributes
    ----------
    array : str or None
        The array's path in its store (``"/"`` for the root), if known.
    key : str or None
        The store key of the chunk (of its shard, for an inner chunk), if known.
    codec : str or None
        The codec that failed (``"conditional > zstd"`` for a nested one), if known.
    inner : tuple of int or None
        The inner chunk's coordinates within its shard.
    """

    def __init__(
        self,
        reason: str,
        *,
        array: str | None = None,
        key: str | None = None,
        codec: str | None = None,
        inner: tuple[int, ...] | None = None,
    ) -> None:
        self.reason = reason
        self.array = array
        self.key = key
        self.codec = codec
        self.inner = inner
        super().__init__(self._message())

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled by keyword (a Dask worker's error reaches the client whole).
        return (_rebuild, (self.reason, self.array, self.key, self.codec, self.inner))

    def _message(self) -> str:
        where = []
        if self.array is not None:
            where.append(f"array {self.array or '/'!r}")
        if self.key is not None:
            where.append(f"chunk {self.key!r}")
        if self.inner is not None:
            where.append(f"inner chunk {list(self.inner)}")
        place = ", ".join(where) or "a chunk"
        by = f" with codec {self.codec!r}" if self.codec else ""
        return f"{place}: cannot decode{by}: {self.reason}"

    def located(
        self, *, array: str | None = None, key: str | None = None
    ) -> ChunkDecodeError:
        """This error with what it does not know yet of ``array`` and ``key`` filled in
        (an inner chunk's error learns its shard's key from the outer pipeline)."""
        if (self.array is not None or array is None) and (self.key is not None or key is None):
            return self
        error = ChunkDecodeError(
            self.reason,
            array=self.array if self.array is not None else array,
            key=self.key if self.key is not None else key,
            codec=self.codec,
            inner=self.inner,
        )
        error.__cause__ = self.__cause__
        return error

    @classmethod
    def wrapping(
        cls,
        error: BaseException,
        *,
        array: str | None = None,
        key: str | None = None,
        inner: tuple[int, ...] | None = None,
        codecs: tuple[Any, ...] = (),
    ) -> ChunkDecodeError:
        """A ``ChunkDecodeError`` for ``error`` raised while decoding a chunk.

        The codec is read from ``error``'s traceback (the codecs whose methods it
        passed through, outermost first); when none is found there, ``codecs`` (the
        chain) is named. The result's ``__cause__`` is the codec's error: raise it
        ``from`` that. An ``error`` that already is a ``ChunkDecodeError`` (an inner
        chunk's) is returned with its location completed and the same cause.
        """
        if isinstance(error, ChunkDecodeError):
            return error.located(array=array, key=key)
        found = failing_codecs(error)
        codec = " > ".join(found) if found else (
            ", ".join(codec_name(c) for c in codecs) or None
        )
        if found or not codecs:
            reason = error_text(error)
        else:
            reason = f"{error_text(error)} (in the codec chain)"
        wrapped = cls(reason, array=array, key=key, codec=codec, inner=inner)
        wrapped.__cause__ = error
        return wrapped


class DamagedChunksError(ChunkDecodeError):
    """A job went on past chunks it could not decode and left each as it was stored.

    A :class:`ChunkDecodeError` (a ``ValueError``) about the first of them, so that
    code catching that keeps working; :attr:`damaged` names every one.

    Attributes
    ----------
    damaged : list of ChunkDecodeError
        Every chunk left as it was, in store order.
    report : object
        What the job did to the other chunks (e.g. a
        :class:`~zarrext.recompression.RecompressReport`).
    """

    SHOWN = 5  # damaged chunks named in the message; the rest are counted

    def __init__(self, what: str, damaged: list[ChunkDecodeError], report: Any) -> None:
        if not damaged:
            raise ValueError("DamagedChunksError needs at least one damaged chunk")
        self.what = what
        self.damaged = list(damaged)
        self.report = report
        first = self.damaged[0]
        super().__init__(first.reason, array=first.array, key=first.key, codec=first.codec,
                         inner=first.inner)
        self.__cause__ = first.__cause__

    def __reduce__(self) -> tuple[Any, ...]:
        return (DamagedChunksError, (self.what, self.damaged, self.report))

    def _message(self) -> str:
        n = len(self.damaged)
        shown = "; ".join(str(e) for e in self.damaged[: self.SHOWN])
        more = f"; and {n - self.SHOWN} more (see .damaged)" if n > self.SHOWN else ""
        return f"{self.what} {counted(n, 'damaged chunk')} as stored: {shown}{more}"


_BYTES_LITERAL = re.compile(r"""(?<![\w'"])b('(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")""")
MAX_HEX_BYTES = 32  # longer byte strings are cut, their length said


def hex_bytes(text: str) -> str:
    r"""``text`` with each Python bytes literal in it written as hex.

    Codecs put ``repr(bytes)`` in their errors (zarr's crc32c: ``Stored:
    b'@\x07\xef;'``), which reads as noise; a checksum reads as a number.

    >>> hex_bytes("Stored: b'@\\x07\\xef;'. Computed: b'\\x00\\x01\\x02\\x03'.")
    'Stored: 0x4007ef3b. Computed: 0x00010203.'
    >>> hex_bytes("header b'ZARR\\x00\\x01\\x02\\x03\\x04'")
    'header 5a 41 52 52 00 01 02 03 04 (9 bytes)'
    """

    def as_hex(match: re.Match[str]) -> str:
        try:
            value = ast.literal_eval(match.group(0))
        except (ValueError, SyntaxError):
            return match.group(0)
        if not isinstance(value, bytes):
            return match.group(0)
        if len(value) <= 8:
            return "0x" + value.hex() if value else "0x (no bytes)"
        shown = value[:MAX_HEX_BYTES].hex(" ")
        return f"{shown}{' ...' if len(value) > MAX_HEX_BYTES else ''} ({len(value)} bytes)"

    return _BYTES_LITERAL.sub(as_hex, text)


def error_text(error: BaseException) -> str:
    """``"Type: message"`` of a codec's error, its bytes written as hex (:func:`hex_bytes`)."""
    return f"{type(error).__name__}: {hex_bytes(str(error))}"


@contextmanager
def naming_chunk(
    *,
    array: str | None = None,
    key: str | None = None,
    inner: tuple[int, ...] | None = None,
    codecs: tuple[Any, ...] = (),
) -> Iterator[None]:
    """Raise a codec's error inside the block as a :class:`ChunkDecodeError` naming
    the array and the chunk (the codec's error names neither), ``from`` it."""
    try:
        yield
    except DECODE_ERRORS as e:
        error = ChunkDecodeError.wrapping(e, array=array, key=key, inner=inner, codecs=codecs)
        raise error from error.__cause__


def _rebuild(
    reason: str,
    array: str | None,
    key: str | None,
    codec: str | None,
    inner: tuple[int, ...] | None,
) -> ChunkDecodeError:
    return ChunkDecodeError(reason, array=array, key=key, codec=codec, inner=inner)


def codec_name(codec: Any) -> str:
    """The name ``codec`` has in metadata (its class name when it has none)."""
    try:
        name = codec.to_dict().get("name")
    except Exception:  # a codec whose configuration cannot be written out
        name = None
    return name if isinstance(name, str) else type(codec).__name__


def _is_codec(value: object) -> bool:
    from zarr.abc.codec import BaseCodec

    return isinstance(value, BaseCodec)


def failing_codecs(error: BaseException) -> list[str]:
    """Names of the codecs whose methods ``error`` was raised through, outermost
    first, each once (``["conditional", "zstd"]``: zstd nested in conditional)."""
    names: list[str] = []
    seen: list[object] = []
    tb: types.TracebackType | None = error.__traceback__
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if owner is not None and _is_codec(owner) and not any(owner is s for s in seen):
            seen.append(owner)
            names.append(codec_name(owner))
        tb = tb.tb_next
    return names
