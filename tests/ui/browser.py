"""A headless Chromium driven by selenium, and `hopsml ui` started in a subprocess, for the browser tests."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

URL_LINE = re.compile(r"at (http://\S+/)\?token=(\S+) \(Ctrl-C")


class Site(str):
    """The view's base URL (a str, as the tests join paths to it) with the token every request needs."""

    token: str

    def __new__(cls, base: str, token: str) -> Site:
        site = super().__new__(cls, base)
        site.token = token
        return site

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def request(self, url: str):
        """A urllib request of `url` that carries the token."""
        import urllib.request

        return urllib.request.Request(url, headers=self.headers)


def chromium_paths() -> tuple[str, str] | None:
    """(browser, driver) of Debian's chromium and chromium-driver, or None when not installed."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


@contextmanager
def ui_server(env: dict[str, str], timeout_s: float = 60.0, args: Sequence[str] = ()) -> Iterator[Site]:
    """`hopsml ui --port 0 --no-browser [args]` in a subprocess; yields its base URL with the token it printed,
    stops it after."""
    proc = subprocess.Popen([sys.executable, "-m", "hopsml.cli", "ui", "--port", "0", "--no-browser", *args],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    found: list[str] = []
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)
            match = URL_LINE.search(line)
            if match and not found:
                found.append((match.group(1), match.group(2)))
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        if not ready.wait(timeout_s) or not found:
            raise RuntimeError(f"hopsml ui did not start within {timeout_s:.0f} s; its output:\n{''.join(lines)}")
        base, token = found[0]
        yield Site(base[: base.index("/", len("http://"))] + "/", token)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def chrome(paths: tuple[str, str]):
    """A headless Chromium that records the browser console."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = paths[0]
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1000", "--no-first-run", "--disable-extensions"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(paths[1]), options=options)


def login(driver, site: Site) -> None:
    """Open the address `hopsml ui` printed, as a user does: the view keeps the token as a cookie."""
    driver.get(f"{site}?token={site.token}")


def artifacts_dir(default: str) -> str:
    folder = os.path.join(os.environ.get("HOPSML_TEST_ARTIFACTS") or default, "ui-screenshots")
    os.makedirs(folder, exist_ok=True)
    return folder
