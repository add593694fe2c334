"""The codec name ``optional``, claimed by two specs.

The conditional meta-codec was first published as ``optional`` (configuration key
``codecs``); the nullable data type's codec is ``optional`` too (configuration keys
``mask_codecs`` and ``data_codecs``). zarr-python maps one name to one class, so
this class owns the name and hands each configuration to the codec it describes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from zarr.abc.codec import BytesBytesCodec

if TYPE_CHECKING:
    from zarr.abc.codec import Codec
    from zarr.core.common import JSON


class OptionalName(BytesBytesCodec):
    """Dispatcher registered under ``optional``; never instantiated."""

    @classmethod
    def from_dict(cls, data: dict[str, JSON]) -> Codec:  # type: ignore[override]
        configuration = data.get("configuration")
        if isinstance(configuration, Mapping):
            if "codecs" in configuration:
                from zarrext.codecs.conditional import ConditionalCodec

                return ConditionalCodec.from_dict(data)
            if "mask_codecs" in configuration or "data_codecs" in configuration:
                from zarrext.codecs.optional import OptionalCodec

                return OptionalCodec.from_dict(data)
        raise ValueError(
            "codec 'optional': configuration must hold 'codecs' (the conditional "
            "meta-codec) or 'mask_codecs'/'data_codecs' (the nullable data type's codec), "
            f"got {configuration!r}"
        )

    def compute_encoded_size(self, input_byte_length: int, chunk_spec: object) -> int:
        raise NotImplementedError
