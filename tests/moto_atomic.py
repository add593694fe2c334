"""moto's S3 server with conditional writes made atomic, as S3's are.

moto checks ``If-None-Match: *`` and ``If-Match`` and then stores the object in two
steps with no lock between them, so two conditional writes of one key arriving at
once can both succeed; on S3 exactly one does. zarrext's object-store outputs rely
on that (``zarrext.jobs.outputs``: a job claims an output with a conditional
create), so the tests' server holds a lock across check and store for conditional
writes. Run as ``python tests/moto_atomic.py -H HOST -p PORT`` (moto.server's options).
"""

from __future__ import annotations

import functools
import threading
from typing import Any


def _atomic_conditional_puts() -> None:
    from moto.s3.responses import S3Response

    lock = threading.Lock()
    put_object = S3Response.put_object

    @functools.wraps(put_object)
    def put(self: Any) -> Any:
        if self.headers.get("If-None-Match") or self.headers.get("If-Match"):
            with lock:
                return put_object(self)
        return put_object(self)

    S3Response.put_object = put  # type: ignore[method-assign]


if __name__ == "__main__":
    from moto.server import main

    _atomic_conditional_puts()
    main()
