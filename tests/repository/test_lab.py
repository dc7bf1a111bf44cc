"""`make lab` starts a JupyterLab server on the textbook that answers on loopback."""

import json
import os
import secrets
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(url: str, token: str) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(request, timeout=5) as response:
        return response.status, response.read()


def test_make_lab_serves_the_notebooks():
    port, token = free_port(), secrets.token_hex(16)
    args = f"--no-browser --ip=127.0.0.1 --port={port} --IdentityProvider.token={token}"
    server = subprocess.Popen(
        ["make", "-s", "lab", f"LAB_ARGS={args}"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # so the whole process group can be stopped
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                status, body = get(f"{base}/api/status", token)
                break
            except OSError:
                assert server.poll() is None, server.stderr.read().decode()[-2000:]
                assert time.monotonic() < deadline, "JupyterLab did not answer within 90 s"
                time.sleep(0.5)
        assert status == 200 and "started" in json.loads(body)
        status, page = get(f"{base}/lab", token)
        assert status == 200 and b"JupyterLab" in page
        status, listing = get(f"{base}/api/contents", token)
        names = {item["name"] for item in json.loads(listing)["content"]}
        expected = {p.name for p in (ROOT / "notebooks").iterdir() if p.is_dir()}
        assert expected and expected <= names
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
