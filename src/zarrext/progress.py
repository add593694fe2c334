"""How long-running library jobs report progress: a plain callback, no rich.

Jobs (:func:`zarrext.recompress`, :func:`zarrext.compact`, :func:`zarrext.expand`)
call ``progress(done, total)`` from the thread that called them; the CLI turns
the calls into a progress bar (``zarrext.cli.render.progress_bar``).
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["ProgressCallback"]

ProgressCallback = Callable[[int, int], None]
"""``progress(done, total)``: units of work finished so far, and how many there are."""
