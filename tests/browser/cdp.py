"""A headless Chromium driven over the DevTools protocol (its websocket, through aiohttp, which
the collection already uses): open a page from disk at a given window size, evaluate
JavaScript in it, take a screenshot. Only loopback; every wait is bounded."""
from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

CANDIDATES = ("chromium", "chromium-browser", "google-chrome")
TIMEOUT = 60.0


def chromium() -> str | None:
    """The browser binary (CHROMIUM overrides), or None."""
    if os.environ.get("CHROMIUM"):
        return os.environ["CHROMIUM"]
    return next((path for path in map(shutil.which, CANDIDATES) if path), None)


class Browser:
    """``with Browser(width, height) as b: b.open(path); b.evaluate(js)``."""

    def __init__(self, width: int = 1300, height: int = 900) -> None:
        self.width, self.height = width, height
        self.profile = tempfile.mkdtemp(prefix="llmops-chromium-")
        self.loop = asyncio.new_event_loop()
        self.ids = itertools.count(1)
        self.proc: subprocess.Popen[bytes] | None = None
        self.session: aiohttp.ClientSession | None = None
        self.ws: aiohttp.ClientWebSocketResponse | None = None

    def __enter__(self) -> Browser:
        binary = chromium()
        if not binary:
            raise RuntimeError("no chromium: make browser-test installs Debian's (apt-get install chromium)")
        self.proc = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
             "--disable-dev-shm-usage", "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
             f"--window-size={self.width},{self.height}", f"--user-data-dir={self.profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        port = self._port()
        self.loop.run_until_complete(self._connect(port))
        return self

    def _port(self) -> int:
        """The DevTools port, from the file Chromium writes into its profile."""
        active = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            if active.is_file() and active.read_text().strip():
                return int(active.read_text().split()[0])
            if self.proc is not None and self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
                raise RuntimeError(f"chromium exited with {self.proc.returncode}: {err[-2000:]}")
            time.sleep(0.1)
        raise RuntimeError(f"chromium wrote no DevTools port in {TIMEOUT:g} s")

    async def _connect(self, port: int) -> None:
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT))
        async with self.session.get(f"http://127.0.0.1:{port}/json/list") as resp:
            pages = [t for t in await resp.json() if t.get("type") == "page"]
        self.ws = await self.session.ws_connect(pages[0]["webSocketDebuggerUrl"], max_msg_size=0)
        await self._call("Page.enable")
        await self._call("Emulation.setDeviceMetricsOverride", width=self.width, height=self.height,
                         deviceScaleFactor=1, mobile=False)

    async def _call(self, method: str, wait_event: str | None = None, **params: Any) -> dict[str, Any]:
        assert self.ws is not None
        ident = next(self.ids)
        await self.ws.send_str(json.dumps({"id": ident, "method": method, "params": params}))
        result: dict[str, Any] | None = None
        seen = wait_event is None
        async with asyncio.timeout(TIMEOUT):
            while result is None or not seen:
                msg = json.loads((await self.ws.receive()).data)
                if msg.get("id") == ident:
                    if "error" in msg:
                        raise RuntimeError(f"{method}: {msg['error']}")
                    result = msg.get("result", {})
                elif wait_event and msg.get("method") == wait_event:
                    seen = True
        return result

    def open(self, path: Path) -> None:
        """Navigate to a file and wait for its load event."""
        self.loop.run_until_complete(self._call("Page.navigate", wait_event="Page.loadEventFired",
                                                url=path.resolve().as_uri()))

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression (JSON-serializable)."""
        out = self.loop.run_until_complete(self._call("Runtime.evaluate", expression=expression, returnByValue=True))
        if out.get("exceptionDetails"):
            raise RuntimeError(f"JavaScript failed: {out['exceptionDetails']}")
        return out["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        """A PNG of the whole page (for a reader of the test's output)."""
        width, height = self.evaluate("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
        data = self.loop.run_until_complete(self._call(
            "Page.captureScreenshot", format="png", captureBeyondViewport=True,
            clip={"x": 0, "y": 0, "width": width, "height": height, "scale": 1}))["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def __exit__(self, *exc: object) -> None:
        try:
            if self.ws is not None:
                self.loop.run_until_complete(self.ws.close())
            if self.session is not None:
                self.loop.run_until_complete(self.session.close())
        finally:
            self.loop.close()
            if self.proc is not None:
                try:
                    os.killpg(self.proc.pid, 9)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=30)
            shutil.rmtree(self.profile, ignore_errors=True)


def version() -> str:
    binary = chromium()
    if not binary:
        return "none"
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60).stdout
    return re.sub(r"\s+", " ", out).strip()
