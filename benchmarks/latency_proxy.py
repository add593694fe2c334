"""A TCP proxy on loopback that adds a fixed delay to every request passing through.

``python benchmarks/latency_proxy.py TARGET_PORT [--delay-ms 20] [--max-seconds 900]``
listens on a free loopback port, prints it on stdout (one line), and forwards every
connection to ``127.0.0.1:TARGET_PORT``. Bytes from the client that start a new
request (the first bytes of a connection, or the first after the server has
answered) wait ``--delay-ms`` before being forwarded: one added round trip per HTTP
request, as a distant object store would add, without slowing the bytes of a body.

Bounded: at most ``--max-connections`` connections are served at once (more wait),
reads are 64 KiB at most, and the proxy stops by itself after ``--max-seconds`` even
if nobody stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from dataclasses import dataclass

READ_SIZE = 64 * 1024


@dataclass
class _Turn:
    """Whose turn it is on one connection: the next client bytes start a request."""

    request_starts: bool = True


async def _pump(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    turn: _Turn,
    *,
    from_client: bool,
    delay: float,
) -> None:
    while data := await reader.read(READ_SIZE):
        if from_client and turn.request_starts:
            turn.request_starts = False
            await asyncio.sleep(delay)
        elif not from_client:
            turn.request_starts = True  # the server answered: the next request is new
        writer.write(data)
        await writer.drain()


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()


async def serve(
    target_port: int, delay: float, max_seconds: float, max_connections: int
) -> None:
    """Serve until ``max_seconds`` have passed; print the listening port first."""
    slots = asyncio.Semaphore(max_connections)

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        async with slots:
            try:
                server_r, server_w = await asyncio.open_connection("127.0.0.1", target_port)
            except OSError:
                await _close(client_w)
                return
            turn = _Turn()
            pumps = [
                asyncio.create_task(_pump(client_r, server_w, turn, from_client=True,
                                          delay=delay)),
                asyncio.create_task(_pump(server_r, client_w, turn, from_client=False,
                                          delay=delay)),
            ]
            # Either side closing (or failing) ends the connection for both.
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            for task in pumps:
                task.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            await _close(server_w)
            await _close(client_w)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await asyncio.sleep(max_seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target_port", type=int)
    parser.add_argument("--delay-ms", type=float, default=20.0)
    parser.add_argument("--max-seconds", type=float, default=900.0)
    parser.add_argument("--max-connections", type=int, default=256)
    args = parser.parse_args()
    asyncio.run(serve(args.target_port, args.delay_ms / 1000, args.max_seconds,
                      args.max_connections))


if __name__ == "__main__":
    main()
