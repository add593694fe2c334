"""Writer-side decisions for the ``conditional`` codec: which nested codecs to apply.

A decision sees one chunk at a time and returns the chunk's mask (bit ``i`` set =
nested codec ``i`` applied) together with the bytes that mask produces. Decisions
are runtime settings: they are not codec metadata.

Three kinds are accepted wherever a decision is:

- a user function in one of the spec's three signatures (see :func:`from_function`);
- the spelling of a built-in (:data:`BUILTIN_DECISIONS`): its name, e.g.
  ``"compress_if_smaller"``, or its name and arguments (:func:`from_spelling`);
- an ``int``: the same mask for every chunk;

or a :class:`Decision` object, e.g. from :func:`from_plan`.

A decision is not metadata, but :func:`zarrext.create_array` records a built-in's
spelling in the array's attributes (``{"zarrext": '{"decision": "<spelling>"}'}``: a
JSON object in a string, a value netCDF takes too; see :func:`decision_record`) so that
:func:`zarrext.open_array` can use it again.

A built-in decision is one class: a :class:`BuiltinDecision` subclass that declares
its ``name`` and ``parameters``, registered with :func:`builtin`. Its spelling, what
``decision=``, the CLI's ``--decision`` and the record take, is its name alone or
followed by its arguments in parentheses, by position or as ``parameter=value``, each
a Python literal (a number): ``"compress_if_smaller"``, ``"ratio_at_most(0.9)"``,
``"ratio_at_most(r=0.9)"``. The record holds the canonical spelling (the name alone,
or every argument as ``parameter=value``). A zarrext writer of an array with no
decision at all stores chunks raw and says so once (:class:`NoDecisionWarning`);
xarray's ``to_zarr`` too, once zarrext is imported (:mod:`zarrext.xarray.writes`).

What a decision sees: an interpretation of the spec
---------------------------------------------------
Spec 000 (Phase 2) hands a decision function "the original, unencoded chunk" and
a trial encoding "of the original, unencoded chunk", and its default rule enables
a codec when ``len(trial) < len(unencoded)``. Read literally, every nested codec
is judged on the chunk as it entered the conditional codec. zarrext reads it as a
cascade instead: nested codec ``i`` is shown, and tried on, the bytes as they stand
after the codecs already enabled before it (``unencoded_chunk`` is the input codec
``i`` would receive; for codec 0 that is the original chunk), and an accepted
trial's output is kept as the chunk's bytes, never computed twice. Why:

- the codecs are applied in order when the chunk is stored, so a codec's trial on
  its real input is the only one that says what the stored chunk becomes;
- a filter that keeps the size (``shuffle``) can pay only through the codec after
  it: ``compress_if_smaller`` applies it tentatively and keeps it when that codec
  then shrinks the bytes below what they were before the filter (shuffle+zstd is
  often much smaller than zstd alone); the literal rule never enables it, since
  ``len(shuffle(chunk)) == len(chunk)``;
- every accepted step of ``compress_if_smaller`` makes the bytes strictly shorter
  than they were before it, so the stored chunk is never longer than the raw chunk
  plus the header (which fixed shard slots rely on). Codecs judged one by one on
  the original bytes give no such bound: each may shrink the raw chunk while the
  next one, applied to what the one before it made, grows it (gzip after zstd).

The spec-literal reading is there too: the built-in ``"spec_literal"``
(:class:`SpecLiteral`) is the default rule applied to the original chunk, each
codec alone, the codecs it enables then applied in order; and
``from_function(func, cascade=False)`` shows a decision function the original
chunk, and trials of it, for every codec. With ``[shuffle, zstd]`` the literal
rule stores zstd alone (mask ``0b10``) where ``compress_if_smaller`` stores both
(``0b11``); see the documentation's ``conditional`` guide (docs/guide/conditional.md).
"""

from __future__ import annotations

import ast
import inspect
import json
import threading
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from zarrext.codecs.chunk_context import ChunkIndex, describe_chunk

if TYPE_CHECKING:
    from zarr.abc.codec import BytesBytesCodec
    from zarr.core.buffer import Buffer

__all__ = [
    "BUILTIN_DECISIONS",
    "RECORD_KEY",
    "BuiltinDecision",
    "ChunkEncoding",
    "CodecInfo",
    "NO_DECISION",
    "Decision",
    "DecisionError",
    "NoDecisionWarning",
    "SpecLiteral",
    "Undecided",
    "builtin",
    "builtin_choices",
    "builtin_spelling",
    "decision_record",
    "from_function",
    "format_mask",
    "from_plan",
    "from_spelling",
    "recorded_decision",
    "resolve_decision",
    "with_record",
    "without_decision_record",
    "zarrext_record",
]

MAX_SMALLEST_CODECS = 8


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
        The bytes entering the conditional codec.
    encode_step : callable
        ``encode_step(i, buffer)`` applies nested codec ``i`` to ``buffer``.
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
    """

    name: str = "custom"
    trial_encode: bool = False
    guarantees_no_inflation: bool = False
    keeps_chunk_bytes: bool = True

    def check(self, n_codecs: int) -> None:  # noqa: B027 - optional hook
        """Raise if this decision cannot work with ``n_codecs`` nested codecs."""

    @abstractmethod
    def choose(self, chunk: ChunkEncoding) -> tuple[int, Buffer]:
        """Return ``(mask, encoded bytes)`` for ``chunk``."""

    def __repr__(self) -> str:
        return f"<decision {self.name}>"


class BuiltinDecision(Decision):
    """A decision zarrext knows by its spelling: ``decision="<spelling>"``, the CLI's
    ``--decision``, and the record from which a reopened array takes it again.

    A subclass declares its ``name`` and its ``parameters`` (its constructor's
    arguments, in order, each kept as the attribute of the same name, and an
    ``example`` spelling of them) and is registered with :func:`builtin`.
    :meth:`spelling` gives the canonical spelling, which :func:`from_spelling` turns
    into an equal decision.
    """

    parameters: ClassVar[tuple[str, ...]] = ()
    example: ClassVar[str | None] = None
    """A spelling with arguments, for one with parameters: the one the tests round-trip."""
    keeps_chunk_bytes = False

    @classmethod
    def from_arguments(cls, *args: Any, **kwargs: Any) -> Decision:
        """The decision a spelling's arguments give, the constructor's (a
        :class:`DecisionError` for values it refuses)."""
        return cls(*args, **kwargs)

    @classmethod
    def usage(cls) -> str:
        """The name and the parameters, as help lists them: ``ratio_at_most(r)``."""
        return f"{cls.name}({', '.join(cls.parameters)})" if cls.parameters else cls.name

    @classmethod
    def example_spelling(cls) -> str:
        """A spelling of this decision: its ``example``, else its name."""
        return cls.example or cls.name

    def spelling(self) -> str:
        """The canonical spelling: the name alone, or every argument as ``parameter=value``."""
        if not self.parameters:
            return self.name
        arguments = ", ".join(f"{p}={getattr(self, p)!r}" for p in self.parameters)
        return f"{self.name}({arguments})"

    def __repr__(self) -> str:
        return f"<decision {self.spelling()}>"


BUILTIN_DECISIONS: dict[str, type[BuiltinDecision]] = {}
"""Every built-in decision's class by its name, in the order declared (:func:`builtin`)."""


def builtin[B: type[BuiltinDecision]](cls: B) -> B:
    """Register a :class:`BuiltinDecision` subclass under its ``name``."""
    if cls.name in BUILTIN_DECISIONS:
        raise ValueError(f"two built-in decisions are named {cls.name!r}")
    BUILTIN_DECISIONS[cls.name] = cls
    return cls


def builtin_choices() -> str:
    """The built-in decisions as help and errors list them: ``compress_if_smaller, ...``."""
    return ", ".join(cls.usage() for cls in BUILTIN_DECISIONS.values())


def from_spelling(spelling: str) -> BuiltinDecision:
    """The built-in decision ``spelling`` names (see the module docstring's grammar).

    Raises
    ------
    DecisionError
        When ``spelling`` names no built-in decision, or gives it arguments it does
        not take or refuses.
    """
    try:
        expression: ast.expr | None = ast.parse(spelling.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError):  # ValueError: a NUL byte
        expression = None
    call = expression if isinstance(expression, ast.Call) else None
    head = call.func if call is not None else expression
    if not isinstance(head, ast.Name) or head.id not in BUILTIN_DECISIONS:
        raise DecisionError(f"unknown decision {spelling!r}; built-ins are {builtin_choices()}")
    cls = BUILTIN_DECISIONS[head.id]
    positional, keywords = (call.args, call.keywords) if call is not None else ([], [])
    try:
        args = [ast.literal_eval(a) for a in positional]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in keywords if k.arg is not None}
        if len(kwargs) < len(keywords):  # **mapping
            raise ValueError
    except (ValueError, TypeError, SyntaxError, RecursionError):
        raise DecisionError(
            f"decision {spelling!r}: the arguments must be literals (numbers), as in "
            f"{cls.usage()}"
        ) from None
    try:
        inspect.signature(cls).bind(*args, **kwargs)
    except TypeError as e:
        raise DecisionError(f"decision {spelling!r}: {e}; spell it {cls.usage()}") from None
    decision = cls.from_arguments(*args, **kwargs)
    assert isinstance(decision, BuiltinDecision)
    return decision


def _all_bits(n: int) -> int:
    return (1 << n) - 1


def format_mask(mask: int, n_codecs: int) -> str:
    """A conditional codec's mask as zarrext prints it everywhere: ``0b`` + one digit per codec.

    Bit ``i`` (nested codec ``i`` applied) is the ``i``-th digit from the right, so
    with two nested codecs ``0b01`` is the first codec alone and ``0b11`` both. A mask
    with bits beyond ``n_codecs`` (invalid) shows all of its bits.

    >>> format_mask(1, 2), format_mask(0, 4), format_mask(0b101, 2)
    ('0b01', '0b0000', '0b101')
    """
    return f"0b{int(mask):0{max(int(n_codecs), 1)}b}"


def lowest_bit_beyond(mask: int, n_codecs: int) -> int | None:
    """The lowest bit of ``mask`` at or above ``n_codecs``, or ``None`` if there is none."""
    extra = mask >> n_codecs
    return n_codecs + (extra & -extra).bit_length() - 1 if extra else None


def check_mask(mask: int, n_codecs: int, where: str) -> int:
    """Refuse masks that set bits beyond the configured codecs."""
    if isinstance(mask, bool) or not isinstance(mask, int | np.integer):
        raise DecisionError(f"{where}: mask must be an integer, got {mask!r}")
    mask = int(mask)
    if mask < 0:
        raise DecisionError(f"{where}: mask must be >= 0, got {mask}")
    bit = lowest_bit_beyond(mask, n_codecs)
    if bit is not None:
        raise DecisionError(
            f"{where}: mask {format_mask(mask, n_codecs)} sets bit {bit}, but only {n_codecs} "
            "nested codecs are configured"
        )
    return mask


class FixedMask(Decision):
    """The same mask for every chunk (``None``: every nested codec)."""

    keeps_chunk_bytes = False

    def __init__(self, mask: int | None, name: str) -> None:
        self.mask = mask
        self.name = name
        self.guarantees_no_inflation = mask == 0

    def check(self, n_codecs: int) -> None:
        if self.mask is not None:
            check_mask(self.mask, n_codecs, f"decision {self.name!r}")

    def choose(self, chunk: ChunkEncoding) -> tuple[int, Buffer]:
        # Bits beyond the codecs were refused by check(); the codec checks the result too.
        mask = _all_bits(len(chunk.codecs)) if self.mask is None else self.mask
        return mask, chunk.apply(mask)


@builtin
class CompressIfSmaller(BuiltinDecision):
    """Apply a codec only when it makes the chunk strictly smaller.

    The spec's rule, ``len(trial) < len(unencoded)``, cascaded. A codec whose trial
    keeps the size unchanged (a filter such as ``shuffle``) is applied tentatively
    and kept only if the next size-changing codec, applied on top of it, makes the
    bytes smaller than they were before the filter; otherwise that codec is tried
    once more without the filter. Filters with no size-changing codec after them
    are not applied. Every kept step shrinks the bytes, so the result is never
    longer than the input.
    """

    name = "compress_if_smaller"
    trial_encode = True
    guarantees_no_inflation = True

    def choose(self, chunk: ChunkEncoding) -> tuple[int, Buffer]:
        mask = 0
        base = chunk.data  # bytes before any tentative filter
        current = base
        pending = 0  # bits of tentatively applied size-preserving codecs
        for i in range(len(chunk.codecs)):
            out = chunk.encode(i, current)
            if len(out) == len(current):
                pending |= 1 << i
                current = out
                continue
            if len(out) < len(base):
                mask |= pending | 1 << i
                base = current = out
            elif pending:
                alone = chunk.encode(i, base)
                if len(alone) < len(base):
                    mask |= 1 << i
                    base = alone
                current = base
            else:
                current = base
            pending = 0
        return mask, base


@builtin
class AlwaysApply(FixedMask, BuiltinDecision):
    """Every nested codec, in order, on every chunk."""

    name = "always_apply"

    def __init__(self) -> None:
        super().__init__(None, self.name)


@builtin
class NeverApply(FixedMask, BuiltinDecision):
    """No nested codec: every chunk stored raw (mask 0). Its spelling gives
    :data:`NEVER_APPLY`, which the codec stores without asking it."""

    name = "never_apply"

    def __init__(self) -> None:
        super().__init__(0, self.name)

    @classmethod
    def from_arguments(cls, *args: Any, **kwargs: Any) -> Decision:
        return NEVER_APPLY


NEVER_APPLY = NeverApply()


@builtin
class SpecLiteral(BuiltinDecision):
    """Spec 000's default rule read literally: every codec judged on the original chunk.

    Nested codec ``i`` is trial-encoded on the chunk as it entered the conditional
    codec (not on the output of the codecs before it) and enabled when its trial
    is strictly shorter than that chunk; the enabled codecs are then applied in
    order (the first one's trial is its output; the rest are encoded once more on
    what precedes them). A filter that keeps the size (``shuffle``) is never
    enabled, and the enabled codecs together may give more bytes than the raw
    chunk, so the output is not bounded by it (``guarantees_no_inflation`` False).
    ``compress_if_smaller`` is zarrext's cascaded reading (see the module docstring).
    """

    name = "spec_literal"
    trial_encode = True

    def choose(self, chunk: ChunkEncoding) -> tuple[int, Buffer]:
        mask = 0
        first: Buffer | None = None
        for i in range(len(chunk.codecs)):
            trial = chunk.encode(i, chunk.data)
            if len(trial) < len(chunk.data):
                first = trial if first is None else first
                mask |= 1 << i
        return mask, _apply_after_first(chunk, mask, first)


def _apply_after_first(chunk: ChunkEncoding, mask: int, first: Buffer | None) -> Buffer:
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


@builtin
class Smallest(BuiltinDecision):
    """Try every mask and keep the smallest output; ties go to fewer codecs.

    Prefixes are shared (a depth-first walk), so ``2**n - 1`` nested encodes at
    most. Refuses more than :data:`MAX_SMALLEST_CODECS` nested codecs.
    """

    name = "smallest"
    trial_encode = True
    guarantees_no_inflation = True

    def check(self, n_codecs: int) -> None:
        if n_codecs > MAX_SMALLEST_CODECS:
            raise DecisionError(
                f"decision 'smallest' tries all 2**n masks and refuses more than "
                f"{MAX_SMALLEST_CODECS} nested codecs; this conditional codec has {n_codecs}"
            )

    def choose(self, chunk: ChunkEncoding) -> tuple[int, Buffer]:
        n = len(chunk.codecs)
        self.check(n)
        best: tuple[tuple[int, int, int], Buffer] | None = None

        def visit(i: int, mask: int, buffer: Buffer) -> None:
            nonlocal best
            if i == n:
                key = (len(buffer), mask.bit_count(), mask)
                if best is None or key < best[0]:
                    best = (key, buffer)
                return
            visit(i + 1, mask, buffer)
            visit(i + 1, mask | 1 << i, chunk.encode(i, buffer))

        visit(0, 0, chunk.data)
        assert best is not None
        return best[0][2], best[1]


@builtin
class RatioAtMost(BuiltinDecision):
    """Every nested codec, in order, when together they make the chunk at most ``r``
    of its size; else none (the chunk stored raw).

    ``ratio_at_most(0.9)`` compresses only the chunks it shrinks by 10% or more, so
    that readers decode only where it pays. ``r`` is in (0, 1], so the output is
    never longer than the input.
    """

    name = "ratio_at_most"
    parameters = ("r",)
    example = "ratio_at_most(0.9)"
    trial_encode = True
    guarantees_no_inflation = True

    def __init__(self, r: float) -> None:
        if isinstance(r, bool) or not isinstance(r, int | float) or not 0 < r <= 1:
            raise DecisionError(f"decision {self.name!r}: r must be a number in (0, 1], got {r!r}")
        self.r = float(r)

    def choose(self, chunk: ChunkEncoding) -> tuple[int, Buffer]:
        mask = _all_bits(len(chunk.codecs))
        out = chunk.apply(mask)
        if chunk.data and len(out) / len(chunk.data) <= self.r:
            return mask, out
        return 0, chunk.data


class Plan(Decision):
    """Masks computed beforehand, looked up by chunk index (spec example 3)."""

    name = "plan"
    keeps_chunk_bytes = False

    def __init__(self, masks: np.ndarray) -> None:
        masks = np.asarray(masks)
        if not np.issubdtype(masks.dtype, np.integer):
            raise DecisionError(f"from_plan: masks must be an integer array, got {masks.dtype}")
        if masks.size and masks.min() < 0:
            raise DecisionError("from_plan: masks must be >= 0")
        self.masks = masks

    def check(self, n_codecs: int) -> None:
        if self.masks.size and int(self.masks.max()) >> n_codecs:
            check_mask(int(self.masks.max()), n_codecs, "from_plan")

    def choose(self, chunk: ChunkEncoding) -> tuple[int, Buffer]:
        index = chunk.chunk_index
        if index is None:
            raise DecisionError(
                "a plan decision needs the chunk index; open the array with "
                "zarrext.open_array or zarrext.create_array"
            )
        if len(index) != self.masks.ndim or any(
            not 0 <= c < s for c, s in zip(index, self.masks.shape, strict=True)
        ):
            raise DecisionError(
                f"{chunk.where()} is outside the plan, whose shape is {self.masks.shape}"
            )
        # check() refused bits beyond the codecs; the codec checks the result too.
        mask = int(self.masks[index])
        return mask, chunk.apply(mask)


def from_plan(masks: Any) -> Decision:
    """A decision that applies precomputed masks, indexed by chunk index.

    Parameters
    ----------
    masks : array-like of int
        One mask per chunk, shaped like the chunk grid (for sharded arrays, like
        the array-wide grid of inner chunks).
    """
    return Plan(np.asarray(masks))


# Signatures from the spec, told apart by arity and parameter names.
_PLAIN = "plain"  # (chunk_index, codec, unencoded_chunk)
_TRIAL = "trial"  # (chunk_index, codec, unencoded_chunk, trial_encoded_chunk)
_INDEXED = "indexed"  # (chunk_index, codec_index, codec, unencoded_chunk)


def _signature_kind(func: Callable[..., Any], trial_encode: bool | None) -> str:
    try:
        params = [
            p
            for p in inspect.signature(func).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError) as e:
        raise DecisionError(f"cannot read the signature of decision {func!r}: {e}") from e
    names = [p.name for p in params]
    if len(params) == 3:
        return _PLAIN
    if len(params) == 4:
        if names[1] == "codec_index":
            return _INDEXED
        if names[3].startswith("trial"):
            return _TRIAL
        if trial_encode is not None:
            return _TRIAL if trial_encode else _INDEXED
        raise DecisionError(
            f"decision function {getattr(func, '__name__', func)!r} takes 4 parameters "
            f"{tuple(names)}, which fits two of the spec's signatures; name the second "
            "'codec_index' or the fourth 'trial_encoded_chunk', or pass trial_encode"
        )
    raise DecisionError(
        f"decision function {getattr(func, '__name__', func)!r} takes {len(params)} "
        "positional parameters; expected (chunk_index, codec, unencoded_chunk), "
        "(chunk_index, codec, unencoded_chunk, trial_encoded_chunk) or "
        "(chunk_index, codec_index, codec, unencoded_chunk)"
    )


def _read_only(buffer: Buffer) -> np.ndarray:
    """A read-only view of ``buffer``: a decision must not alter the bytes being stored."""
    view = buffer.as_numpy_array().view()
    view.flags.writeable = False
    return view


class FunctionDecision(Decision):
    """A user function called once per nested codec, as the spec's phase 2 describes.

    ``cascade`` (default): codec ``i`` is shown the bytes after the codecs enabled
    before it; else the original chunk, for every codec (see :func:`from_function`).
    """

    def __init__(
        self, func: Callable[..., Any], trial_encode: bool | None, cascade: bool = True
    ) -> None:
        self.func = func
        self.cascade = cascade
        self.kind = _signature_kind(func, trial_encode)
        if self.kind == _TRIAL and trial_encode is False:
            raise DecisionError(
                f"decision {getattr(func, '__name__', func)!r} takes a trial-encoded chunk, "
                "but trial_encode=False"
            )
        self.trial_encode = bool(trial_encode) or self.kind == _TRIAL
        self.name = getattr(func, "__name__", "custom")

    def choose(self, chunk: ChunkEncoding) -> tuple[int, Buffer]:
        mask = 0
        current = chunk.data
        first: Buffer | None = None  # spec-literal: the first enabled codec's trial
        for info in chunk.codecs:
            trial = chunk.encode(info.index, current) if self.trial_encode else None
            unencoded = _read_only(current)
            try:
                if self.kind == _PLAIN:
                    answer = self.func(chunk.chunk_index, info, unencoded)
                elif self.kind == _INDEXED:
                    answer = self.func(chunk.chunk_index, info.index, info, unencoded)
                else:
                    assert trial is not None
                    answer = self.func(chunk.chunk_index, info, unencoded, _read_only(trial))
            except Exception as e:
                raise DecisionError(
                    f"decision {self.name!r} raised {type(e).__name__} for {chunk.where()}, "
                    f"nested codec {info.index} ({info.name!r}): {e}"
                ) from e
            if not isinstance(answer, bool | np.bool_):
                raise DecisionError(
                    f"decision {self.name!r} returned {answer!r} ({type(answer).__name__}) for "
                    f"{chunk.where()}, nested codec {info.index} ({info.name!r}); "
                    "expected True or False"
                )
            if not answer:
                continue
            mask |= 1 << info.index
            if not self.cascade:  # every codec is shown the original chunk
                first = trial if first is None else first
                continue
            current = trial if trial is not None else chunk.encode(info.index, current)
        if not self.cascade:
            return mask, _apply_after_first(chunk, mask, first)
        return mask, current


def from_function(
    func: Callable[..., Any], trial_encode: bool | None = None, *, cascade: bool = True
) -> Decision:
    """Wrap a per-codec decision function.

    Parameters
    ----------
    func : callable
        One of ``(chunk_index, codec, unencoded_chunk)``,
        ``(chunk_index, codec, unencoded_chunk, trial_encoded_chunk)`` or
        ``(chunk_index, codec_index, codec, unencoded_chunk)``; returns a bool.
        A four-parameter function is the ``codec_index`` form when its second
        parameter is named ``codec_index``, and the trial form when its fourth
        parameter's name starts with ``trial`` (or ``trial_encode=True``).
        ``codec`` is a :class:`CodecInfo` (``.name``, ``.configuration``,
        ``.codec``); ``unencoded_chunk`` and ``trial_encoded_chunk`` are 1-D
        ``uint8`` arrays: the bytes codec ``i`` would receive (after the codecs
        already enabled) and what it makes of them.
    trial_encode : bool, optional
        Trial-encode every codec before asking. Defaults to what the signature needs.
    cascade : bool
        True (zarrext's reading of the spec, see the module docstring): codec ``i``
        is shown the bytes after the codecs enabled before it. False (the spec read
        literally): every codec is shown the original, unencoded chunk and its
        trial of that chunk; the codecs the function enables are then applied in
        order.
    """
    return FunctionDecision(func, trial_encode, cascade)


class _NoDecision(FixedMask):
    """What a ``conditional`` codec holds when given no decision: mask 0, the spec's
    default, like ``never_apply`` but not chosen. zarrext's writers tell the two
    apart: they replace this one with the decision an array's attributes record, or
    with :class:`Undecided`, which says that chunks are stored raw; a
    ``never_apply`` given on purpose is kept. Unpickles as :data:`NO_DECISION`."""

    def __init__(self) -> None:
        # a name of its own: reprs and reports tell "not given" from Undecided's "none"
        super().__init__(0, "not given")

    def __reduce__(self) -> str:
        return "NO_DECISION"


NO_DECISION = _NoDecision()

DecisionLike = Decision | str | int | Callable[..., Any] | None


def resolve_decision(decision: DecisionLike, trial_encode: bool | None = None) -> Decision:
    """Turn anything accepted as a decision into a :class:`Decision`.

    ``None`` means no decision: every nested codec is skipped (the spec's default),
    as :data:`NO_DECISION`, which zarrext's writers tell from ``"never_apply"``.
    """
    if decision is None:
        return NO_DECISION
    if isinstance(decision, str):
        decision = from_spelling(decision)
    if isinstance(decision, Decision):
        if trial_encode is False and decision.trial_encode:
            raise DecisionError(
                f"decision {decision.name!r} works by trial encoding; trial_encode=False "
                "contradicts it"
            )
        return decision
    if isinstance(decision, bool):
        raise DecisionError("a decision cannot be a bool; use 'always_apply' or 'never_apply'")
    if isinstance(decision, int | np.integer):
        if decision < 0:
            raise DecisionError(f"a fixed mask must be >= 0, got {decision}")
        # the decision does not know its codec yet: as many digits as the mask needs
        return FixedMask(int(decision), f"mask {format_mask(decision, int(decision).bit_length())}")
    if callable(decision):
        return from_function(decision, trial_encode)
    raise DecisionError(f"not a decision: {decision!r}")


class Undecided(FixedMask):
    """No decision given and none recorded: mask 0 (the spec's default), said once.

    zarrext binds it to the ``conditional`` codecs of an array opened or created
    with neither a ``decision=`` nor a recorded one. It stores every chunk raw, as
    plain zarr-python writers do, and warns (:class:`NoDecisionWarning`) when it
    chooses the first chunk: one warning per opened array, however many chunks,
    threads or ``conditional`` codecs (they share this object).

    Parameters
    ----------
    array : str
        The array, as the warning names it.
    advice : str, optional
        What the warning tells the writer to do, for writers that do not go through
        :func:`zarrext.open_array` (xarray's ``to_zarr``).
    """

    ADVICE = (
        "pass decision=, e.g. 'compress_if_smaller', to zarrext.open_array or "
        "zarrext.create_array (create_array records a built-in decision for later "
        "opens), or run zarrext recompress"
    )

    def __init__(self, array: str, advice: str | None = None) -> None:
        super().__init__(0, "none")
        self.array = array
        self.advice = advice or self.ADVICE
        self.warned = False

    def choose(self, chunk: ChunkEncoding) -> tuple[int, Buffer]:
        if not self.warned:
            with _WARN_LOCK:  # codec threads choose chunks concurrently
                first = not self.warned
                self.warned = True
            if first:
                warnings.warn(
                    f"array {self.array} has a conditional codec but no decision, so its "
                    f"chunks are stored raw (mask 0); {self.advice}",
                    NoDecisionWarning,
                    stacklevel=2,
                )
        return super().choose(chunk)


# One lock for all Undecided objects: a lock of their own would not pickle (Dask).
_WARN_LOCK = threading.Lock()

# The attribute under which zarrext records what later writers need: the decision
# zarrext.create_array was given, a quantization plan.
RECORD_KEY = "zarrext"


def zarrext_record(attributes: Mapping[str, Any]) -> dict[str, Any] | None:
    """What ``attributes["zarrext"]`` records, as an object (``None``: nothing, or not
    a record zarrext wrote).

    zarrext writes the record as a string holding a JSON object (:func:`with_record`),
    so that xarray can write it to netCDF (any engine) and back to Zarr; the nested
    object that zarrext wrote before is read too.
    """
    value = attributes.get(RECORD_KEY)
    if isinstance(value, bytes):  # netCDF 3 text read without decoding
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return dict(value) if isinstance(value, Mapping) else None


def with_record(attributes: Mapping[str, Any] | None, what: str, **entries: Any) -> dict[str, Any]:
    """``attributes`` with ``entries`` recorded under ``"zarrext"``, beside what is
    recorded there already, as a string holding a JSON object (:func:`zarrext_record`).

    Raises
    ------
    ValueError
        When ``attributes["zarrext"]`` is there and not a record; ``what`` (e.g.
        ``"decision"``) names what was to be recorded.
    """
    out = dict(attributes or {})
    record = zarrext_record(out)
    if record is None and out.get(RECORD_KEY) is not None:
        raise ValueError(
            f"attributes[{RECORD_KEY!r}] is {out[RECORD_KEY]!r}; zarrext records the "
            f"array's {what} in a JSON object under that key (pass attributes without "
            f"{RECORD_KEY!r})"
        )
    out[RECORD_KEY] = json.dumps({**(record or {}), **entries})
    return out


def builtin_spelling(decision: DecisionLike) -> str | None:
    """The canonical spelling that recreates ``decision``, or ``None`` if there is none.

    Built-ins given by spelling or as the objects their spellings give have one;
    functions, fixed masks, plans and subclasses of a built-in (whose behaviour a
    spelling cannot carry) have none.
    """
    if isinstance(decision, str):
        try:
            return from_spelling(decision).spelling()
        except DecisionError:
            return None
    if isinstance(decision, BuiltinDecision) and type(decision) is BUILTIN_DECISIONS.get(
        decision.name
    ):
        return decision.spelling()
    return None


def decision_record(attributes: Mapping[str, Any]) -> Any:
    """What an array's attributes record as its decision, as stored (``None`` if nothing).

    The record is the ``decision`` of :func:`zarrext_record`; attributes that use the
    ``zarrext`` key for something other than a record record nothing.
    """
    record = zarrext_record(attributes)
    return record.get("decision") if record is not None else None


def without_decision_record(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """``attributes`` less the decision record (:func:`decision_record`): for a copy
    of an array whose codecs have no ``conditional`` for the record to steer, so
    that no report (``zarrext info``) names a decision the copy does not have."""
    out = dict(attributes)
    record = zarrext_record(out)
    if record is not None and "decision" in record:
        del record["decision"]
        del out[RECORD_KEY]
        if record:
            out = with_record(out, "records", **record)
    return out


def recorded_decision(attributes: Mapping[str, Any], where: str) -> str | None:
    """The built-in decision's spelling an array's attributes record, checked.

    Parameters
    ----------
    attributes : mapping
        The array's attributes.
    where : str
        The array, as an error names it.

    Raises
    ------
    DecisionError
        When the record spells no built-in decision (hand-edited, or written by a
        newer zarrext).
    """
    spelling = decision_record(attributes)
    if spelling is None or builtin_spelling(spelling) is not None:
        return spelling
    raise DecisionError(
        f"{where}: attribute {RECORD_KEY}.decision records {spelling!r}, which is not a "
        f"built-in decision ({builtin_choices()}); pass decision= to choose one"
    )
