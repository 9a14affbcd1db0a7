"""Connection flood against a running server: ``--sockets`` idle TCP connections (sending
nothing) are opened to one port, then a well-behaved client makes a liveness call on a
new connection every ``--interval`` seconds for ``--seconds``; printed: how many calls
succeeded, their latency (p50, p99, max), and how many of the idle sockets the server had
closed at the end. Works against Despina and tritonserver alike (liveness needs no model).

    python bench/connection_floods.py --protocol grpc --port 8001
"""

from __future__ import annotations

import argparse
import resource
import socket
import statistics
import time
from contextlib import ExitStack


def live(protocol: str, port: int, timeout: float) -> bool:
    """One liveness call on a new connection; False on any failure."""
    try:
        if protocol == "grpc":
            import tritonclient.grpc as grpcclient

            channel_args = [("grpc.use_local_subchannel_pool", 1)]
            with grpcclient.InferenceServerClient(
                f"127.0.0.1:{port}", channel_args=channel_args
            ) as client:
                return bool(client.is_server_live(client_timeout=timeout))
        import tritonclient.http as httpclient

        with httpclient.InferenceServerClient(
            f"127.0.0.1:{port}", connection_timeout=timeout, network_timeout=timeout
        ) as client:
            return bool(client.is_server_live())
    except Exception:  # noqa: BLE001 - refused, reset, timed out: a failed call
        return False


def closed(sockets: list[socket.socket]) -> int:
    """How many of ``sockets`` the server closed (readable with EOF or reset)."""
    count = 0
    for sock in sockets:
        sock.setblocking(False)
        try:
            while True:
                data = sock.recv(1 << 16)
                if not data:
                    count += 1
                    break
        except BlockingIOError:
            pass  # it sent something (SETTINGS) and is still open
        except OSError:
            count += 1
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protocol", choices=("grpc", "http"), required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--sockets", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--interval", type=float, default=0.1)
    parser.add_argument("--timeout", type=float, default=5.0)
    options = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with ExitStack() as stack:
        idle = []
        for _ in range(options.sockets):
            try:
                idle.append(
                    stack.enter_context(socket.create_connection(("127.0.0.1", options.port), 5))
                )
            except OSError as exc:
                print(f"idle socket {len(idle)} not connected: {exc}")
                break
        latencies, failures = [], 0
        end = time.monotonic() + options.seconds
        while time.monotonic() < end:
            start = time.perf_counter()
            if live(options.protocol, options.port, options.timeout):
                latencies.append(time.perf_counter() - start)
            else:
                failures += 1
            time.sleep(options.interval)
        shut = closed(idle)
    calls = len(latencies) + failures
    line = f"{options.protocol}: {len(idle)} idle sockets; {len(latencies)}/{calls} calls ok"
    if latencies:
        cut = (
            statistics.quantiles(latencies, n=100, method="inclusive")
            if len(latencies) > 1
            else latencies * 99
        )
        line += (
            f"; latency p50 {cut[49] * 1e3:.1f} ms, p99 {cut[98] * 1e3:.1f} ms, "
            f"max {max(latencies) * 1e3:.1f} ms"
        )
    print(f"{line}; {shut} idle sockets closed by the server after {options.seconds:g} s")


if __name__ == "__main__":
    main()
