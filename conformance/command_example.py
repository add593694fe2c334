"""The ``cmd:`` protocol (PROTOCOL.md), implemented by a small program over zarr-python.

A model for an implementation in another language::

    python -m conformance.run --impl "cmd:python -m conformance.command_example"

``read STORE OUT.npy``: read the whole array at STORE, save it to OUT.npy.
``write STORE IN.npy SELECTION_JSON WRITER_JSON``: write IN.npy into the selection
(``null`` or ``[[start, stop], ...]``). Exit status: 0 done; 3 when the case needs
something this program cannot do (here: a writer setting, a codec or data type
zarr-python does not know); a refusal exits with its cause's status, 10
``invalid_metadata`` (opening the array failed), 11 ``malformed_chunk`` (reading
failed), 12 ``value_not_representable`` (writing failed, or reading a value out of
range); one line on stderr says why. A bug (a TypeError, ...) is left to crash:
the runner reports it as an error, never as a refusal.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np

# values.py, for the optional type's values and validity (PROTOCOL.md): run as a script,
# this file sees the repository's root only when told
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from conformance.values import load_file, save_file

INVALID_METADATA, MALFORMED_CHUNK, VALUE_NOT_REPRESENTABLE, NOT_SUPPORTED = 10, 11, 12, 3
VALUE_WORDS = re.compile(r"out of range|outside the range|overflow|cannot cast", re.I)


def main(argv: list[str]) -> int:
    import zarr
    from zarr.errors import UnknownCodecError

    def refuse(status: int, error: Exception) -> int:
        print(f"{type(error).__name__}: {error}", file=sys.stderr)
        return status

    command, store = argv[0], argv[1]
    if command == "write":
        writer = json.loads(argv[4])
        if writer.get("conditional_masks") or writer.get("decision") not in (None,
                                                                             "never_apply"):
            print("no way to give zarr-python a conditional mask or decision", file=sys.stderr)
            return NOT_SUPPORTED
    try:
        array = zarr.open_array(store, mode="r" if command == "read" else "r+")
    except UnknownCodecError as error:
        return refuse(NOT_SUPPORTED, error)
    except ValueError as error:
        return refuse(INVALID_METADATA, error)
    if command == "read":
        try:
            values = np.asarray(array[...])
        except ValueError as error:
            value = VALUE_WORDS.search(str(error))
            return refuse(VALUE_NOT_REPRESENTABLE if value else MALFORMED_CHUNK, error)
        save_file(argv[2], values)  # an optional type's validity beside, in OUT.valid.npy
        return 0
    selection = json.loads(argv[3])
    region = (Ellipsis,) if selection is None else tuple(slice(a, b) for a, b in selection)
    try:
        array[region] = load_file(argv[2])
    except ValueError as error:
        return refuse(VALUE_NOT_REPRESENTABLE, error)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
