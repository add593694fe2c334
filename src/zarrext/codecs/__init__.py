"""Codecs that zarrext registers with zarr-python (entry-point group ``zarr.codecs``)."""

from __future__ import annotations

from zarrext.codecs.conditional import ConditionalCodec
from zarrext.codecs.shuffle import ShuffleCodec

__all__ = ["ConditionalCodec", "ShuffleCodec"]
