"""Spec 000's cases under the name its text uses.

Spec 000's text names its codec ``optional``; the zarr-extensions registry (and most
of the corpus) names it ``conditional``. Every spec 000 case stored under
``conditional`` has a twin under ``optional``, the same in every other respect, so
that an implementation written from the text alone can pass every spec 000 case;
``case.json``'s ``codec_name`` says which name a case tests.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from conformance.builders.common import Case, spec_000_codec_name

SUFFIX = "-as-optional"


def _renamed(codecs: Any) -> Any:
    out = []
    for codec in codecs or ():
        if isinstance(codec, dict):
            codec = dict(codec)
            config = codec.get("configuration")
            if codec.get("name") == "conditional":
                codec["name"] = "optional"
            if isinstance(config, dict):
                codec["configuration"] = {k: _renamed(v) if k in ("codecs", "index_codecs")
                                          else v for k, v in config.items()}
        out.append(codec)
    return out


def under_the_spec_000_name(cases: list[Case]) -> list[Case]:
    """A twin named ``optional`` of every spec 000 case whose codec is ``conditional``."""
    twins = []
    for case in cases:
        if case.spec != "000" or spec_000_codec_name(case.metadata) != "conditional":
            continue
        metadata = copy.deepcopy(case.metadata)
        metadata["codecs"] = _renamed(metadata["codecs"])
        assert spec_000_codec_name(metadata) == "optional", case.id
        twins.append(dataclasses.replace(
            case, id=case.id + SUFFIX, metadata=metadata,
            description=f"{case.description} Under the name `optional`, the name spec "
                        f"000's text gives the codec (the twin of `{case.id}`)."))
    return twins
