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

A built-in decision is one class in :mod:`~zarrext.codecs.decisions.builtins`: a
:class:`BuiltinDecision` subclass that declares its ``name`` and ``parameters``,
registered with :func:`builtin` (:mod:`~zarrext.codecs.decisions.registry`, which
also gives the spelling's grammar: ``"compress_if_smaller"``, ``"ratio_at_most(0.9)"``).
A zarrext writer of an array with no decision at all stores chunks raw and says so
once (:class:`NoDecisionWarning`); xarray's ``to_zarr`` too, once zarrext is imported
(:mod:`zarrext.xarray.writes`).

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

The modules, one story each
---------------------------
:mod:`~zarrext.codecs.decisions.base` (the :class:`Decision` interface and the chunk it
sees), :mod:`~zarrext.codecs.decisions.masks` (the mask notation and its checks),
:mod:`~zarrext.codecs.decisions.fixed` (fixed masks, plans, no decision),
:mod:`~zarrext.codecs.decisions.registry` (built-ins by spelling),
:mod:`~zarrext.codecs.decisions.builtins` (the built-ins),
:mod:`~zarrext.codecs.decisions.functions` (user functions),
:mod:`~zarrext.codecs.decisions.resolving` (:func:`resolve_decision`) and
:mod:`~zarrext.codecs.decisions.record` (the attribute record). Every public name
is importable from this package.
"""

from __future__ import annotations

# builtins registers the built-in decisions, which from_spelling looks up: importing
# any module of this package runs this first.
from zarrext.codecs.decisions.base import (
    ChunkEncoding,
    CodecInfo,
    Decision,
    DecisionError,
    DecisionLike,
    NoDecisionWarning,
)
from zarrext.codecs.decisions.builtins import (
    MAX_SMALLEST_CODECS,
    NEVER_APPLY,
    AlwaysApply,
    CompressIfSmaller,
    NeverApply,
    RatioAtMost,
    Smallest,
    SpecLiteral,
)
from zarrext.codecs.decisions.fixed import NO_DECISION, FixedMask, Plan, Undecided, from_plan
from zarrext.codecs.decisions.functions import FunctionDecision, from_function
from zarrext.codecs.decisions.masks import check_mask, format_mask, lowest_bit_beyond
from zarrext.codecs.decisions.record import (
    RECORD_KEY,
    decision_record,
    recorded_decision,
    with_record,
    without_decision_record,
    zarrext_record,
)
from zarrext.codecs.decisions.registry import (
    BUILTIN_DECISIONS,
    BuiltinDecision,
    builtin,
    builtin_choices,
    builtin_spelling,
    from_spelling,
)
from zarrext.codecs.decisions.resolving import resolve_decision

__all__ = [
    "BUILTIN_DECISIONS",
    "MAX_SMALLEST_CODECS",
    "NEVER_APPLY",
    "NO_DECISION",
    "RECORD_KEY",
    "AlwaysApply",
    "BuiltinDecision",
    "ChunkEncoding",
    "CodecInfo",
    "CompressIfSmaller",
    "Decision",
    "DecisionError",
    "DecisionLike",
    "FixedMask",
    "FunctionDecision",
    "NeverApply",
    "NoDecisionWarning",
    "Plan",
    "RatioAtMost",
    "Smallest",
    "SpecLiteral",
    "Undecided",
    "builtin",
    "builtin_choices",
    "builtin_spelling",
    "check_mask",
    "decision_record",
    "format_mask",
    "from_function",
    "from_plan",
    "from_spelling",
    "lowest_bit_beyond",
    "recorded_decision",
    "resolve_decision",
    "with_record",
    "without_decision_record",
    "zarrext_record",
]
