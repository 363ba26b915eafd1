"""``python -m dynshape serve`` listens on the loopback address only (issue 31, item 4; the
README's "Serving" section says so): every listening TCP socket of the processes it starts
(the CLI, Ray's GCS, raylet and agents, Serve's controller, proxy and replica) is read from
``/proc`` and checked. The same server compiles a program given as text, under its compile
budget, and answers the protocol's routes under the name ``--name`` gives."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from serve_testlib import request, start_serve, url_of

NEEDS = ("ray.serve",)  # imported before the first test (conftest.py), not at collection
PROGRAM = "def @main(%x: Tensor[(batch, 3), float32]) -> Tensor[(batch, 3), float32] { exp(%x) }"
LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}

pytestmark = pytest.mark.skipif(
    not Path("/proc/net/tcp").exists(), reason="reads the sockets from Linux's /proc"
)


def _descendants(root: int) -> list[int]:
    """``root`` and every process it started, and they started (from /proc/*/stat)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:  # ended meanwhile
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])  # after the command's name
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _address(hex_address: str, family: socket.AddressFamily) -> tuple[str, int]:
    """An address of /proc/net/tcp{,6}: each 32-bit word of the IP in host (little-endian)
    order, then the port."""
    ip, port = hex_address.split(":")
    raw = bytes.fromhex(ip)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return socket.inet_ntop(family, words), int(port, 16)


def _listening() -> dict[int, tuple[str, int]]:
    """Every listening TCP socket of this machine, by inode."""
    found = {}
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        lines = Path(f"/proc/net/{table}").read_text().splitlines()[1:]
        for fields in (line.split() for line in lines):
            if fields[3] == "0A":  # LISTEN
                found[int(fields[9])] = _address(fields[1], family)
    return found


def listening_sockets(root: int) -> list[tuple[str, int, str]]:
    """(address, port, process) of each socket the processes under ``root`` listen on."""
    sockets = _listening()
    found = []
    for pid in _descendants(root):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            args = Path(f"/proc/{pid}/cmdline").read_text().split("\0")
        except OSError:
            continue
        name = " ".join([Path(args[0]).name, *args[1:]]).strip()[:60]  # raylet, ray::Serve...
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:[") and int(link[8:-1]) in sockets:
                found.append((*sockets[int(link[8:-1])], name))
    return found


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[subprocess.Popen[str], str]]:
    folder = tmp_path_factory.mktemp("sockets")
    (folder / "model.txt").write_text(PROGRAM + "\n")
    options = ("model.txt", "--name", "expo", "--port", "0", "--time-budget", "120")
    proc, line = start_serve(folder, *options)
    try:
        assert line.startswith("serving model.txt at http://127.0.0.1:"), line
        assert "as /v2/models/expo" in line
        yield proc, url_of(line)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_every_listening_socket_is_on_loopback(server: tuple[subprocess.Popen[str], str]) -> None:
    proc, url = server
    found = listening_sockets(proc.pid)
    port = int(url.rsplit(":", 1)[1])
    assert any(p == port for _, p, _ in found), found  # the HTTP proxy's, at least
    names = " ".join(name for _, _, name in found)
    assert "ServeReplica" in names and "raylet" in names, found  # the replica's gRPC server
    outward = [s for s in found if s[0] not in LOOPBACK]
    assert not outward, f"listening beyond loopback: {outward}"


def test_the_served_program_answers_under_its_name(
    server: tuple[subprocess.Popen[str], str],
) -> None:
    _, url = server
    assert request(f"{url}/v2/health/ready")[0] == 200
    assert request(f"{url}/v2/models/expo/ready")[0] == 200
    status, body = request(f"{url}/v2/models/model/ready")
    assert status == 404 and json.loads(body) == {
        "error": "unknown model 'model' (this server serves 'expo')"
    }
    infer = {"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [0, 0, 0]}]}
    status, body = request(f"{url}/v2/models/expo/infer", json.dumps(infer).encode())
    assert status == 200 and json.loads(body)["outputs"][0]["data"] == [1.0, 1.0, 1.0]
