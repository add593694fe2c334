"""Reference test vectors for zarrext's five specs, their generator and their runner.

``python -m conformance.generate`` rebuilds ``conformance/cases/`` from the specs'
byte layouts (it never imports zarrext); ``python -m conformance.run --impl NAME``
runs every case against an implementation. See ``conformance/README.md``.
"""
