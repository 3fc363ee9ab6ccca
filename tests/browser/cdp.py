"""A minimal Chrome DevTools Protocol client over a stdlib WebSocket, for the browser test.

Headless Chromium is started with --remote-debugging-port=0; this module reads the port it
picked, connects to the page target and sends CDP commands (navigate, evaluate JavaScript,
type text, capture screenshots). No third-party package: a WebSocket client is ~60 lines.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--window-size=1280,900",
)


def find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


class WebSocket:
    """Just enough of RFC 6455 for CDP: masked text frames out, (fragmented) frames in."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        match = re.match(r"ws://([^:/]+):(\d+)(/.*)", url)
        if not match:
            raise ValueError(f"not a ws:// URL: {url}")
        host, port, path = match.group(1), int(match.group(2)), match.group(3)
        self.sock = socket.create_connection((host, port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        # No Origin header: Chromium only accepts origins named in --remote-allow-origins.
        request = (
            f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        self.sock.sendall(request.encode())
        response = b""
        while b"\r\n\r\n" not in response:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("websocket handshake: connection closed")
            response += chunk
        head, self.buffer = response.split(b"\r\n\r\n", 1)
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError(f"websocket handshake refused: {head[:200]!r}")

    def send(self, text: str) -> None:
        payload = text.encode()
        header = bytes([0x81])
        length = len(payload)
        if length < 126:
            header += bytes([0x80 | length])
        elif length < 1 << 16:
            header += bytes([0x80 | 126]) + struct.pack(">H", length)
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", length)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(header + mask + masked)

    def _read(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = self.sock.recv(max(65536, n - len(self.buffer)))
            if not chunk:
                raise ConnectionError("websocket closed")
            self.buffer += chunk
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def recv(self) -> str:
        message = b""
        while True:
            first, second = self._read(2)
            opcode = first & 0x0F
            length = second & 0x7F
            if length == 126:
                length = struct.unpack(">H", self._read(2))[0]
            elif length == 127:
                length = struct.unpack(">Q", self._read(8))[0]
            mask = self._read(4) if second & 0x80 else b""
            payload = self._read(length)
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            if opcode == 0x8:
                raise ConnectionError("websocket closed by the browser")
            if opcode == 0x9:  # ping: answer, keep reading
                continue
            message += payload
            if first & 0x80:
                return message.decode()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


class Browser:
    """Headless Chromium driven through CDP. Use as a context manager."""

    def __init__(self, executable: str, timeout: float = 60.0) -> None:
        self.profile = tempfile.mkdtemp(prefix="trainwreck-chromium-")
        self.process = subprocess.Popen(
            [
                executable,
                *FLAGS,
                f"--user-data-dir={self.profile}",
                "--remote-debugging-port=0",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group, so every child dies with it
        )
        self.next_id = 0
        self.ws: WebSocket | None = None
        try:
            port = self._devtools_port(timeout)
            self.ws = WebSocket(self._page_target(port), timeout=timeout)
            self.call("Page.enable")
            self.call("Runtime.enable")
        except BaseException:
            self.close()
            raise

    def _devtools_port(self, timeout: float) -> int:
        assert self.process.stderr is not None
        deadline = time.monotonic() + timeout
        lines = []
        while time.monotonic() < deadline:
            line = self.process.stderr.readline()
            if not line:
                if self.process.poll() is not None:
                    break
                continue
            lines.append(line.strip())
            match = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            if match:
                # Keep draining stderr so a chatty browser never blocks on a full pipe.
                threading.Thread(target=self.process.stderr.read, daemon=True).start()
                return int(match.group(1))
        raise RuntimeError("chromium did not start: " + " | ".join(lines[-5:]))

    @staticmethod
    def _page_target(port: int) -> str:
        for _ in range(50):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as reply:
                targets = json.load(reply)
            pages = [t for t in targets if t.get("type") == "page"]
            if pages:
                return pages[0]["webSocketDebuggerUrl"]
            time.sleep(0.1)
        raise RuntimeError("chromium has no page target")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        assert self.ws is not None
        self.next_id += 1
        ident = self.next_id
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def evaluate(self, expression: str) -> Any:
        result = self.call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"javascript error: {result['exceptionDetails']}")
        return result.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float = 20.0) -> Any:
        """Poll a JavaScript expression until it is truthy; returns its value (or raises)."""
        deadline = time.monotonic() + timeout
        value = None
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.2)
        raise TimeoutError(f"timed out waiting for: {expression} (last value {value!r})")

    def open(self, url: str, timeout: float = 30.0) -> None:
        self.call("Page.navigate", url=url)
        self.wait_for(
            f"document.readyState === 'complete' && location.href.startsWith({json.dumps(url.split('?')[0])})",
            timeout,
        )

    def type_text(self, text: str) -> None:
        self.call("Input.insertText", text=text)

    def screenshot(self, path: Path, full_page: bool = True) -> None:
        if full_page:
            height = int(self.evaluate("document.documentElement.scrollHeight") or 900)
            self.call(
                "Emulation.setDeviceMetricsOverride",
                width=1280,
                height=min(height, 12000),
                deviceScaleFactor=1,
                mobile=False,
            )
        data = self.call("Page.captureScreenshot", format="png")["data"]
        if full_page:
            self.call("Emulation.clearDeviceMetricsOverride")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        if self.ws is not None:
            self.ws.close()
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=10)
        if self.process.stderr is not None:
            self.process.stderr.close()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
