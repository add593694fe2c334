"""User functions as decisions: the spec's three signatures (:func:`from_function`)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from zarrext.codecs.decisions.base import ChunkEncoding, Decision, DecisionError, apply_after_first

if TYPE_CHECKING:
    from zarr.core.buffer import Buffer

__all__ = ["FunctionDecision", "from_function"]


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
            return mask, apply_after_first(chunk, mask, first)
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
        True (zarrext's reading of the spec, see :mod:`zarrext.codecs.decisions`): codec ``i``
        is shown the bytes after the codecs enabled before it. False (the spec read
        literally): every codec is shown the original, unencoded chunk and its
        trial of that chunk; the codecs the function enables are then applied in
        order.
    """
    return FunctionDecision(func, trial_encode, cascade)
