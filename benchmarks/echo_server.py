"""A bare gRPC echo service on the sidecar's server stack (grpc.aio, the same server options), the floor of
the put-latency benchmark: ``python benchmarks/echo_server.py unix:/path/echo.sock``.

``/bench.Echo/Echo`` (unary) and ``/bench.Echo/EchoStream`` (bidirectional) return each request's bytes
unchanged; nothing is parsed. ``/bench.Echo/Blob`` (unary) answers a request holding a decimal byte count
``n`` with ``n`` bytes (made once per size): the floor of a read whose response is that big.
"""
from __future__ import annotations

import asyncio
import sys

import grpc

SERVER_OPTIONS = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20),
                  ("grpc.so_reuseport", 0)]  # as sidecar/server.py


async def serve(address: str) -> None:
    server = grpc.aio.server(options=SERVER_OPTIONS)

    async def echo(request, context):
        return request

    async def echo_stream(requests, context):
        async for request in requests:
            yield request

    blobs: dict[int, bytes] = {}

    async def blob(request, context):
        n = int(request)
        if n not in blobs:
            blobs[n] = bytes(range(256)) * (n // 256) + bytes(n % 256)
        return blobs[n]

    handlers = {"Echo": grpc.unary_unary_rpc_method_handler(echo),
                "Blob": grpc.unary_unary_rpc_method_handler(blob),
                "EchoStream": grpc.stream_stream_rpc_method_handler(echo_stream)}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("bench.Echo", handlers),))
    server.add_insecure_port(address)
    await server.start()
    print("ready", flush=True)
    await server.wait_for_termination()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1]))
