from __future__ import annotations

import socket


def free_ports(count: int) -> list[int]:
    """Ports free on loopback right now, for a server started by a test."""
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports
