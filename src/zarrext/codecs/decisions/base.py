"""What a decision is: the :class:`Decision` interface, the chunk it works on
(:class:`ChunkEncoding`, its nested codecs as :class:`CodecInfo`), and its errors."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from zarrext.codecs.chunk_context import ChunkIndex, describe_chunk

if TYPE_CHECKING:
    from zarr.abc.codec import BytesBytesCodec
    from zarr.core.buffer import Buffer

__all__ = [
    "ChunkEncoding",
    "CodecInfo",
    "Decision",
    "DecisionError",
    "DecisionLike",
    "NoDecisionWarning",
    "apply_after_first",
]


class DecisionError(ValueError):
    """A decision failed or answered something that is not a decision."""


class NoDecisionWarning(UserWarning):
    """A zarrext writer stores chunks through a ``conditional`` codec that has no decision."""


@dataclass(frozen=True)
class CodecInfo:
    """A nested codec as a decision function sees it.

    Attributes
    ----------
    index : int
        Position in the conditional codec's ``codecs`` list (= header bit).
    codec : BytesBytesCodec
        The zarr-python codec object.
    """

    index: int
    codec: BytesBytesCodec

    @property
    def name(self) -> str:
        """The codec's registered name, e.g. ``"zstd"``."""
        return str(self.codec.to_dict()["name"])

    @property
    def configuration(self) -> dict[str, Any]:
        """The codec's configuration as it appears in ``zarr.json``."""
        configuration = self.codec.to_dict().get("configuration") or {}
        return dict(configuration) if isinstance(configuration, Mapping) else {}

    def __repr__(self) -> str:
        return f"CodecInfo({self.index}, {self.name!r})"


class ChunkEncoding:
    """One chunk on its way through a conditional codec: what a :class:`Decision` works on.

    Parameters
    ----------
    chunk_index : tuple of int or None
        The chunk's coordinates in the array's chunk grid (``None`` if unknown).
    codecs : tuple of CodecInfo
        The nested codecs.
    data : Buffer
        The bytes entering the conditional codec (for a decision with
        ``opaque_bytes``: a one-dimensional ``uint8`` array).
    encode_step : callable
        ``encode_step(i, buffer)`` applies nested codec ``i`` to ``buffer`` (for a
        decision with ``opaque_bytes``: an array or ``bytes`` object, to one).
    """

    def __init__(
        self,
        chunk_index: ChunkIndex | None,
        codecs: tuple[CodecInfo, ...],
        data: Buffer,
        encode_step: Callable[[int, Buffer], Buffer],
    ) -> None:
        self.chunk_index = chunk_index
        self.codecs = codecs
        self.data = data
        self._encode_step = encode_step
        self.encode_calls = 0

    def encode(self, i: int, buffer: Buffer) -> Buffer:
        """Apply nested codec ``i`` to ``buffer``."""
        self.encode_calls += 1
        return self._encode_step(i, buffer)

    def apply(self, mask: int) -> Buffer:
        """Encode the chunk's bytes with exactly the codecs of ``mask``."""
        out = self.data
        for i in range(len(self.codecs)):
            if mask >> i & 1:
                out = self.encode(i, out)
        return out

    def where(self) -> str:
        return describe_chunk(self.chunk_index)


class Decision(ABC):
    """Chooses a chunk's mask and produces the bytes for it.

    Subclasses implement :meth:`choose`. ``guarantees_no_inflation`` is True when
    the chosen bytes are never longer than the input: a writer may then bound the
    encoded size of a chunk by its raw size plus the header (fixed shard slots).
    ``keeps_chunk_bytes`` is False when nothing of the chunk's bytes (its data,
    trial encodings) is kept once :meth:`choose` returns: the pipeline may then
    encode the chunk into memory it reuses for the next one. A user's decision may
    keep them (to record them, say), so it defaults to True; the built-ins set it
    False, and a subclass of one that keeps bytes must set it True again.

    ``opaque_bytes`` is True when :meth:`choose` only measures (``len``) the
    chunk's bytes and its encodings and hands them back (to ``encode``, or as its
    result), never calling a method on them: the codec then gives it the bytes as
    numpy arrays or ``bytes`` objects, not zarr ``Buffer`` objects, which saves
    their wrapping at every step of every chunk. Only a class that says so in its
    own body has it: a subclass of one is given ``Buffer`` objects again unless
    it says so too.
    """

    name: str = "custom"
    trial_encode: bool = False
    guarantees_no_inflation: bool = False
    keeps_chunk_bytes: bool = True
    opaque_bytes: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # A subclass may look into the bytes its parent only measured: it must say so.
        if "opaque_bytes" not in cls.__dict__:
            cls.opaque_bytes = False

    def check(self, n_codecs: int) -> None:  # noqa: B027 - optional hook
        """Raise if this decision cannot work with ``n_codecs`` nested codecs."""

    @abstractmethod
    def choose(self, chunk: ChunkEncoding) -> tuple[int, Buffer]:
        """Return ``(mask, encoded bytes)`` for ``chunk``."""

    def __repr__(self) -> str:
        return f"<decision {self.name}>"


def apply_after_first(chunk: ChunkEncoding, mask: int, first: Buffer | None) -> Buffer:
    """The chunk encoded with the codecs of ``mask`` in order, given ``first``: the
    lowest codec's output on the original chunk (its trial), or None to encode it."""
    if not mask:
        return chunk.data
    lowest = (mask & -mask).bit_length() - 1
    out = chunk.encode(lowest, chunk.data) if first is None else first
    for i in range(lowest + 1, len(chunk.codecs)):
        if mask >> i & 1:
            out = chunk.encode(i, out)
    return out


DecisionLike = Decision | str | int | Callable[..., Any] | None
"""Anything accepted as a decision (:func:`~zarrext.codecs.decisions.resolve_decision`)."""
