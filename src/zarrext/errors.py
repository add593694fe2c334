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
import lzma
import re
import struct
import types
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from zarr.errors import UnknownCodecError

from zarrext._text import counted

__all__ = [
    "DECODE_ERRORS",
    "ChunkDecodeError",
    "CodecUnavailableError",
    "DamagedChunksError",
    "FillValueError",
    "LargerOutputError",
    "MalformedMetadataError",
    "UnstorableValueError",
    "codec_name",
    "error_text",
    "failing_codecs",
    "hex_bytes",
    "is_decode_error",
    "naming_chunk",
    "naming_codec_holder",
    "naming_malformed_metadata",
]

DECODE_ERRORS: tuple[type[Exception], ...] = (
    ValueError, RuntimeError, TypeError, IndexError, KeyError, ArithmeticError,
    AssertionError, EOFError, struct.error, zlib.error, lzma.LZMAError, OSError,
)
"""What codecs raise on bytes they cannot decode, the one list every path that
decodes catches (then asks :func:`is_decode_error`):

- zarr's and zarrext's codecs, ``crc32c``, ``bytes``: the ``ValueError`` family
  (a size that does not reshape, a checksum mismatch, a bad header);
- ``zstd`` (numcodecs), ``blosc``, ``numcodecs.lz4``: ``RuntimeError``;
- ``gzip``: ``gzip.BadGzipFile`` (an ``OSError``), ``EOFError`` or ``zlib.error``;
- ``numcodecs.zlib``: ``zlib.error``;
- ``numcodecs.bz2``: ``OSError("Invalid data stream")``, or ``ValueError`` /
  ``EOFError`` when cut short;
- ``numcodecs.lzma``: ``lzma.LZMAError``;
- others ``TypeError``, ``IndexError``, ``KeyError``, ``OverflowError``,
  ``struct.error``.

``OSError`` is here for gzip and bz2 only: the store's ``OSError`` (a chunk that
cannot be read is not a damaged chunk) is told apart by :func:`is_decode_error`.
Not ``MemoryError``."""


def is_decode_error(error: BaseException) -> bool:
    """Whether ``error``, caught as one of :data:`DECODE_ERRORS`, is a codec's
    complaint about the bytes it decodes (else the caller re-raises it).

    An ``OSError`` is one when a compressor raised it on its input (gzip's
    ``BadGzipFile``, bz2's ``Invalid data stream``): it carries no ``errno``, and
    its traceback passes through a codec that is not a sharding codec (which reads
    inner chunks from the store). The store's own ``OSError`` (a missing file, a
    refused connection) is not: the chunk may be intact.
    """
    if not isinstance(error, DECODE_ERRORS):
        return False
    if not isinstance(error, OSError) or isinstance(error, gzip.BadGzipFile):
        return True
    codecs = failing_codecs(error)
    return error.errno is None and bool(codecs) and codecs[-1] != "sharding_indexed"


class FillValueError(ValueError, TypeError):
    """A ``fill_value`` in metadata that its data type cannot hold.

    A ``ValueError``, and a ``TypeError`` as well: zarr-python's data types refuse
    a fill value with ``TypeError``, and callers that catch that keep working.
    """


class UnstorableValueError(ValueError):
    """A finite value that a quantized array would not give back as itself.

    Raised before anything of the write is stored (see
    :mod:`zarrext.codecs.quantized_writes`): the value would be stored as a code reserved
    for NaN or an infinity, lie outside the integer type (``cast_value`` would
    refuse, clamp or wrap it), or decode farther than the planned
    ``max_abs_error``. The message is one line naming the array (or xarray
    variable), the value and the range the array stores.

    Attributes
    ----------
    where : str or None
        The array (``"array 'path'"``) or variable (``"variable 'name'"``).
    value : float or None
        The first value refused, in the order of the write.
    """

    def __init__(
        self, message: str, *, where: str | None = None, value: float | None = None
    ) -> None:
        self.where = where
        self.value = value
        super().__init__(message)


class LargerOutputError(ValueError):
    """A copy would take more bytes of chunks than its source: it was not published
    (``allow_larger=True``, ``--allow-larger``, accepts it)."""


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
        :class:`~zarrext.jobs.recompression.RecompressReport`).
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


class CodecUnavailableError(UnknownCodecError):
    """zarr's ``UnknownCodecError`` ("An implementation for codec 'x' is not
    available"), which names the codec alone, naming the array whose metadata
    names it.

    Attributes
    ----------
    reason : str
        zarr's message.
    array : str
        The array's path in its store (``""`` for the store's root).
    store : str or None
        The store as the user named it (a path or URL), if known: the message names
        ``store/array``, else ``array 'path'``.
    codec : str or None
        The codec's name.
    """

    def __init__(
        self, reason: str, *, array: str = "", store: str | None = None,
        codec: str | None = None,
    ) -> None:
        self.reason = reason
        self.array = array.strip("/")
        self.store = store
        self.codec = codec
        super().__init__(f"{self.where}: {reason}")

    @property
    def where(self) -> str:
        """The array as the message names it."""
        if self.store is None:
            return f"array {self.array or '/'!r}"
        return f"{self.store.rstrip('/')}/{self.array}" if self.array else self.store

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_unavailable, (self.reason, self.array, self.store, self.codec))


def _rebuild_unavailable(
    reason: str, array: str, store: str | None, codec: str | None
) -> CodecUnavailableError:
    return CodecUnavailableError(reason, array=array, store=store, codec=codec)


@contextmanager
def naming_codec_holder(
    *, array: str = "", store: str | None = None, group: Any = None
) -> Iterator[None]:
    """Raise zarr's ``UnknownCodecError`` inside the block as a
    :class:`CodecUnavailableError` naming the array, ``from`` it.

    The array is ``array`` (its path in the store named ``store``); while walking the
    members of ``group`` (a ``zarr.Group``: zarr opens them all at once), the member
    whose ``zarr.json`` names the codec, found by reading them.
    """
    try:
        yield
    except UnknownCodecError as e:
        if isinstance(e, CodecUnavailableError):
            raise
        named = re.search(r"codec '([^']*)'", str(e))
        codec = named.group(1) if named else None
        holder = _holder_of(group, codec) if group is not None and codec else None
        raise CodecUnavailableError(
            str(e), array=holder if holder is not None else array, store=store, codec=codec
        ) from e


def _names_codec(codecs: Any, codec: str) -> bool:
    """Whether a ``codecs`` list of metadata (nested codecs too) names ``codec``."""
    if isinstance(codecs, dict):
        return codecs.get("name") == codec or any(_names_codec(v, codec) for v in codecs.values())
    if isinstance(codecs, list):
        return any(_names_codec(v, codec) for v in codecs)
    return False


def _holder_of(group: Any, codec: str) -> str | None:
    """The path in its store of the first array under ``group`` (in key order) whose
    ``zarr.json`` names ``codec``; None when none does or the store cannot be read."""
    import json

    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    store, base = group.store_path.store, group.store_path.path.strip("/")

    async def find() -> str | None:
        prefix = f"{base}/" if base else ""
        keys = sorted([k async for k in store.list_prefix(prefix)])
        for key in keys:
            if key.rsplit("/", 1)[-1] != "zarr.json":
                continue
            stored = await store.get(key, prototype=default_buffer_prototype())
            try:
                document = json.loads(stored.to_bytes()) if stored is not None else None
            except ValueError:
                continue
            if (isinstance(document, dict) and document.get("node_type") == "array"
                    and _names_codec(document.get("codecs"), codec)):
                return key.rpartition("/")[0]
        return None

    try:
        return sync(find())
    except Exception:  # a store that cannot be listed: the array stays unnamed
        return None


METADATA_DOCUMENTS = ("zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata")
"""The metadata documents of Zarr formats 3 and 2."""


class MalformedMetadataError(ValueError):
    """A metadata document (``zarr.json``, ``.zarray``, ...) that is not valid JSON.

    Attributes
    ----------
    reason : str
        The JSON parser's message.
    document : str
        The document's key in its store (``"t/.zarray"``).
    kind : str
        ``"array"``, ``"group"`` or ``"array or group"`` (a document too broken to say).
    store : str or None
        The store as the user named it (a path or URL), if known: the message names
        ``store/document``.
    """

    def __init__(self, reason: str, *, document: str, kind: str,
                 store: str | None = None) -> None:
        self.reason = reason
        self.document = document
        self.kind = kind
        self.store = store
        super().__init__(self._message())

    @property
    def node(self) -> str:
        """The path in its store of the array or group the document describes."""
        return self.document.rpartition("/")[0]

    def _message(self) -> str:
        if self.store is None:
            where, document = f"{self.kind} {self.node or '/'!r}", self.document
        else:
            base = self.store.rstrip("/")
            where = f"{self.kind} {base}/{self.node}" if self.node else f"{self.kind} {base}"
            document = f"{base}/{self.document}"
        return (f"{where}: its metadata {document} is not valid JSON ({self.reason}); "
                "fix or restore it")

    def named_in(self, store: str) -> MalformedMetadataError:
        """This error naming the store ``store`` (a path or URL)."""
        named = MalformedMetadataError(self.reason, document=self.document, kind=self.kind,
                                       store=store)
        named.__cause__ = self.__cause__
        return named

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_malformed, (self.reason, self.document, self.kind, self.store))


def _rebuild_malformed(
    reason: str, document: str, kind: str, store: str | None
) -> MalformedMetadataError:
    return MalformedMetadataError(reason, document=document, kind=kind, store=store)


_NODE_TYPE = re.compile(rb'"node_type"\s*:\s*"(array|group)"')


def _described_kind(name: str, text: bytes) -> str:
    if name == ".zarray":
        return "array"
    if name == ".zgroup":
        return "group"
    found = _NODE_TYPE.search(text) if name == "zarr.json" else None
    return found.group(1).decode() if found else "array or group"


@contextmanager
def naming_malformed_metadata(store: Any, path: str = "") -> Iterator[None]:
    """Raise a metadata document's ``json.JSONDecodeError`` inside the block (zarr's
    open names no file) as a :class:`MalformedMetadataError` naming the document and
    the array or group it describes: the first document under ``path`` in ``store``
    (a zarr store; in key order) that does not parse, ``from`` the parser's error."""
    import json

    try:
        yield
    except json.JSONDecodeError as e:
        found = _malformed_document(store, path)
        if found is None:
            raise
        key, text, reason = found
        raise MalformedMetadataError(
            reason, document=key, kind=_described_kind(key.rsplit("/", 1)[-1], text)
        ) from e


def _malformed_document(store: Any, path: str) -> tuple[str, bytes, str] | None:
    """(key, bytes, the parser's message) of the first metadata document under
    ``path`` that is not valid JSON; None when every one parses or the store cannot
    be read."""
    import json

    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    async def find() -> tuple[str, bytes, str] | None:
        prefix = f"{path.strip('/')}/" if path.strip("/") else ""
        keys = sorted([k async for k in store.list_prefix(prefix)],
                      key=lambda k: (k.count("/"), k))  # the outer documents first
        for key in keys:
            if key.rsplit("/", 1)[-1] not in METADATA_DOCUMENTS:
                continue
            stored = await store.get(key, prototype=default_buffer_prototype())
            if stored is None:
                continue
            text = stored.to_bytes()
            try:
                json.loads(text)
            except ValueError as e:
                return key, text, str(e)
        return None

    try:
        return sync(find())
    except Exception:  # a store that cannot be listed: the parser's error as it is
        return None


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
    >>> hex_bytes("Zstd decompression error: b'Data corruption detected'")
    "Zstd decompression error: 'Data corruption detected'"
    """

    def as_hex(match: re.Match[str]) -> str:
        try:
            value = ast.literal_eval(match.group(0))
        except (ValueError, SyntaxError):
            return match.group(0)
        if not isinstance(value, bytes):
            return match.group(0)
        if len(value) > 8 and all(32 <= b < 127 for b in value):
            return repr(value.decode("ascii"))  # text (numcodecs' zstd: b'Data corruption')
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
        if not is_decode_error(e):
            raise
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
