"""The tests' S3 server makes conditional writes atomic, as S3 does
(tests/moto_atomic.py): of many conditional creates of one key sent at once,
exactly one succeeds, and the object holds that one's bytes."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from zarrext import stores


def test_of_concurrent_conditional_creates_exactly_one_succeeds(s3: dict[str, Any]) -> None:
    for round_ in range(5):
        key = f"claimed-{round_}"
        openers = [stores.open_store(f"{s3['url']}/race", mode="a",
                                     storage_options=s3["options"]) for _ in range(8)]

        with ThreadPoolExecutor(8) as pool:
            outcomes = list(pool.map(
                lambda i, key=key, openers=openers: stores.create_object(
                    openers[i], key, f"writer {i}".encode()),
                range(8)))
        assert outcomes.count(True) == 1, outcomes
        assert outcomes.count(False) == 7, outcomes
        found = stores.read_object(openers[0], key)
        assert found is not None
        assert found[0] == f"writer {outcomes.index(True)}".encode()
