"""A websocket client that completes the handshake, may send a frame or two,
and then never reads: the kernel buffers on both ends fill and the server is
left holding whatever it still sends. Raw TCP with a small receive buffer, so
it takes little to get there."""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
import time


def rss_bytes(pid: int) -> int:
    """Resident set size of a process (VmRSS in /proc/<pid>/status)."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


class SlowClient:
    def __init__(self, port: int, conversation_id, cookie: str, *, rcvbuf: int = 4096) -> None:
        self.port = port
        self.path = f"/ws/chat/{conversation_id}/"
        self.cookie = cookie
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # Before connect, so the window the server sees stays small.
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)

    def connect(self, timeout: float = 10) -> None:
        self.sock.settimeout(timeout)
        self.sock.connect(("127.0.0.1", self.port))
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET {self.path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            f"Origin: http://127.0.0.1:{self.port}\r\nCookie: sessionid={self.cookie}\r\n\r\n"
        )
        self.sock.sendall(request.encode())
        head = b""
        while b"\r\n\r\n" not in head:  # byte by byte: read nothing past the handshake
            byte = self.sock.recv(1)
            if not byte:
                raise AssertionError(f"handshake refused: {head!r}")
            head += byte
        if not head.startswith(b"HTTP/1.1 101"):
            raise AssertionError(f"handshake refused: {head!r}")

    def send_json(self, frame: dict) -> None:
        """One masked text frame (client frames must be masked)."""
        payload = json.dumps(frame).encode()
        mask = os.urandom(4)
        if len(payload) < 126:
            header = struct.pack("!BB", 0x81, 0x80 | len(payload))
        elif len(payload) < 65536:
            header = struct.pack("!BBH", 0x81, 0x80 | 126, len(payload))
        else:
            header = struct.pack("!BBQ", 0x81, 0x80 | 127, len(payload))
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(header + mask + masked)

    def closed_by_server(self, timeout: float) -> bool:
        """Read (now) until the server's end is gone: EOF or reset within
        `timeout` seconds means it closed the connection."""
        deadline = time.monotonic() + timeout
        self.sock.settimeout(0.5)
        while time.monotonic() < deadline:
            try:
                if not self.sock.recv(1 << 20):
                    return True
            except (ConnectionResetError, BrokenPipeError):
                return True
            except TimeoutError:
                continue
        return False

    def close(self) -> None:
        self.sock.close()
