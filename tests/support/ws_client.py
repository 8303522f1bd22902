"""A websocket client that behaves like the chat page: it keeps the last
`seq` per turn, asks for what a gap hides (`sync`), rebuilds from every
`state` frame, and reconnects with backoff when the socket closes."""

from __future__ import annotations

import json
import time

from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect


class TurnTimeout(AssertionError):
    pass


class ChatClient:
    def __init__(self, port: int, conversation_id, cookie: str) -> None:
        self.url = f"ws://127.0.0.1:{port}/ws/chat/{conversation_id}/"
        self.origin = f"http://127.0.0.1:{port}"
        self.cookie = cookie
        self.ws = None
        self.reconnects = 0
        self.syncs = 0
        self.last_turn_id = 0  # the newest turn this client has seen finish
        self.state: dict | None = None

    def _connect(self, deadline: float) -> None:
        delay = 0.25
        while True:
            try:
                self.ws = connect(
                    self.url,
                    additional_headers={"Cookie": f"sessionid={self.cookie}"},
                    origin=self.origin,
                    open_timeout=5,
                )
                return
            except (OSError, InvalidStatus, TimeoutError):
                if time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    def close(self) -> None:
        if self.ws is not None:
            self.ws.close()
            self.ws = None

    def ask(self, text: str, timeout: float = 45) -> list[dict]:
        """Start a turn and return all its events, complete and in `seq` order."""
        deadline = time.monotonic() + timeout
        if self.ws is None:
            self._connect(deadline)
        self.ws.send(json.dumps({"type": "turn.start", "text": text}))
        turn_id, got = None, {}

        def take(frame: dict) -> None:
            nonlocal turn_id
            if frame.get("turn_id") is None or frame["turn_id"] <= self.last_turn_id:
                return
            if turn_id is None:
                turn_id = frame["turn_id"]
            if frame["turn_id"] == turn_id:
                got[frame["seq"]] = frame

        while time.monotonic() < deadline:
            if got and max(got) == len(got) and got[max(got)]["type"] == "turn.finished":
                self.last_turn_id = turn_id
                return [got[s] for s in sorted(got)]
            try:
                frame = json.loads(self.ws.recv(timeout=max(0.1, min(2.0, deadline - time.monotonic()))))
            except TimeoutError:
                continue
            except ConnectionClosed:
                self.reconnects += 1
                self._connect(deadline)
                continue
            if frame["type"] == "state":
                self.state = frame
                for event in (frame["turn"] or {}).get("events", []):
                    take(event)
                continue
            if "seq" not in frame:
                raise AssertionError(f"unexpected frame: {frame}")
            take(frame)
            if turn_id is not None and got:
                have = 0
                while have + 1 in got:
                    have += 1
                if have < max(got):
                    self.syncs += 1
                    self.ws.send(json.dumps({"type": "sync", "turn_id": turn_id, "after_seq": have}))
        raise TurnTimeout(f"turn {turn_id} did not finish within {timeout}s: {[got[s]['type'] for s in sorted(got)]}")
