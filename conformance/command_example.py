"""The ``cmd:`` protocol, implemented by a small program (here over plain zarr-python).

A model for an implementation in another language::

    python -m conformance.run --impl "cmd:python -m conformance.command_example"

``read STORE OUT.npy``: read the whole array at STORE, save it to OUT.npy.
``write STORE IN.npy SELECTION_JSON WRITER_JSON``: write IN.npy into the selection
(``null`` or ``[[start, stop], ...]``). Exit 0 when done, 3 when the case needs
something this program cannot do (here: a writer setting), 1 on any error.
"""

from __future__ import annotations

import json
import sys

import numpy as np


def main(argv: list[str]) -> int:
    import zarr

    try:
        if argv[0] == "read":
            store, out = argv[1:3]
            np.save(out, np.asarray(zarr.open_array(store, mode="r")[...]), allow_pickle=False)
            return 0
        store, source, selection_json, writer_json = argv[1:5]
        writer = json.loads(writer_json)
        if writer.get("conditional_masks") or writer.get("decision") not in (None, "never_apply"):
            print("no way to give zarr-python a conditional mask or decision", file=sys.stderr)
            return 3
        selection = json.loads(selection_json)
        region = (Ellipsis,) if selection is None else tuple(slice(a, b) for a, b in selection)
        zarr.open_array(store, mode="r+")[region] = np.load(source, allow_pickle=False)
        return 0
    except Exception as error:  # a refusal: one line on stderr
        print(f"{type(error).__name__}: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
