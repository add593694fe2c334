"""``python -m conformance.mutants MUTANT read|write ...``: a mutant under the ``cmd:``
protocol (PROTOCOL.md). The mutants that break nothing in particular answer before
importing anything heavy."""

from __future__ import annotations

import os
import signal
import sys
import time

REFUSE_AS = {"refuse-everything-as-invalid_metadata": 10,
             "refuse-everything-as-malformed_chunk": 11,
             "refuse-everything-as-value_not_representable": 12}


def main(argv: list[str]) -> int:
    name, args = argv[0], argv[1:]
    if name == "--table":
        from conformance.mutants import MUTANTS, run_mutant, table

        wide = "--wide" in args  # planted defects against every case of their spec
        print(table({n: run_mutant(n, 2.0 if n == "hang" else 60.0, wide=wide)
                     for n in MUTANTS if not wide or MUTANTS[n].spec}))
        return 0
    if name == "refuse-everything":
        print("refused", file=sys.stderr)
        return 1
    if name in REFUSE_AS:
        print("refused", file=sys.stderr)
        return REFUSE_AS[name]
    if name == "crash-everything":
        raise RuntimeError("crash-everything crashes")
    if name == "abort-everything":
        os.kill(os.getpid(), signal.SIGABRT)
    if name == "hang":
        while True:
            time.sleep(3600)

    from conformance.mutants.program import run

    return run(name, args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
