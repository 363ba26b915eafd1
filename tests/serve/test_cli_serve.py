"""``python -m dynshape serve`` (issue 18, item 4): starts a local Ray Serve application on the
loopback address, prints its URL, answers HTTP, and stops cleanly on Ctrl-C (SIGINT)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from serve_testlib import ENV, start_serve, url_of

import dynshape

NEEDS = ("ray.serve",)  # imported before the first test (conftest.py), not at collection

PROGRAM = """
def @main(%x: Tensor[(batch, 3), float32]) -> Tensor[(batch, 3), float32] { exp(%x) }
"""


def test_serve_prints_its_url_answers_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    dynshape.compile(PROGRAM).save(tmp_path / "m.dsx")
    proc, line = start_serve(tmp_path, "m.dsx", "--batch-symbol", "batch", "--port", "0")
    try:
        assert line.startswith("serving m.dsx at http://127.0.0.1:"), line
        assert "as /v2/models/m " in line
        url = url_of(line) + "/"
        x = np.array([[0.0, 1.0, 2.0]], np.float32)
        body = json.dumps(
            {"inputs": {"x": {"dtype": "float32", "shape": [1, 3], "data": x.ravel().tolist()}}}
        )
        req = urllib.request.Request(
            url, data=body.encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=60) as r:
            (out,) = json.loads(r.read())["outputs"]
        np.testing.assert_allclose(
            np.array(out["data"], np.float32).reshape(1, 3), np.exp(x), rtol=1e-6
        )
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-2000:]
    assert "stopped" in rest and "Traceback" not in err
    # start-up progress on stderr, each step with the seconds since the start
    for step in ("importing Ray Serve", "loading m.dsx", "starting Ray (", "deploying m: 1 "):
        assert re.search(r"\[ *\d+\.\d s\] " + re.escape(step), err), (step, err[-2000:])
    assert re.search(
        r"\] ready; counters at http://127.0.0.1:\d+/v2/models/m/stats, Ray Serve's "
        r"Prometheus metrics at http://127.0.0.1:\d+/metrics",
        err,
    ), err[-2000:]


@pytest.mark.parametrize(
    ("program", "options", "message"),
    [
        (
            PROGRAM.replace("batch, 3", "3, batch"),
            ["--batch-symbol", "batch"],
            "parameter 'x' is Tensor[(3, batch), float32], whose leading dim is not batch",
        ),
        (PROGRAM, ["--batch-symbol", "batch", "--pad", "seq"], "--pad 'seq': expected SYMBOL=FILL"),
        (
            PROGRAM,
            ["--batch-symbol", "batch", "--pad", "batch=0"],
            "cannot pad 'batch': it is the batch symbol",
        ),
        (PROGRAM, ["--pad", "seq=0"], "padding (seq) needs a batch symbol"),
        (PROGRAM, ["--threads", "0"], "threads (0) must be >= 1"),
        (PROGRAM, ["--max-steps", "-5"], "max_steps (-5) must be > 0, or None for no bound"),
        (PROGRAM, ["--timeout", "-1"], "timeout_s (-1.0) must be > 0, or None for no bound"),
        (PROGRAM, ["--name", "a/b"], "model name 'a/b': a non-empty name without '/'"),
        (PROGRAM, ["--replicas", "0"], "replicas (0) must be an integer >= 1"),
        (
            PROGRAM,
            ["--min-replicas", "3", "--max-replicas", "2"],
            "min_replicas (3) must be <= max_replicas (2)",
        ),
        (PROGRAM, ["--min-replicas", "2"], "autoscaling needs max_replicas"),
        (
            PROGRAM,
            ["--max-replicas", "0"],
            "min_replicas (1) and max_replicas (0) must be integers >= 1",
        ),
        (PROGRAM, ["--max-replicas", "2", "--target-requests", "0"], "target_requests (0.0) must"),
        (
            PROGRAM,
            ["--max-replicas", "2", "--target-requests", "9"],
            "target_requests (9.0) must be <= the requests one replica takes in at once (5",
        ),
        (
            PROGRAM,
            ["--replicas", "2", "--max-replicas", "3"],
            "replicas (2) is a fixed number: give it or the autoscaling bounds",
        ),
        (PROGRAM, ["--retries", "-1"], "retries (-1) >= 0"),
        (
            PROGRAM,
            ["--generate", "--batch-symbol", "batch"],
            "--batch-symbol is for inference; --generate joins generations per decode step",
        ),
        (PROGRAM, ["--generate", "--threads", "2"], "--threads is for inference; --generate"),
        (PROGRAM, ["--generate"], "the model has no input 'input_ids' (its inputs: x)"),
        (PROGRAM, ["--limit-new-tokens", "5"], "--limit-new-tokens and --limit-prompt-tokens"),
    ],
)
def test_serve_refuses_what_cannot_be_served_and_says_why(
    tmp_path: Path, program: str, options: list[str], message: str
) -> None:
    dynshape.compile(program).save(tmp_path / "m.dsx")
    assert message in _refusal(tmp_path, "m.dsx", options)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--max-batch", "0"], "max_rows (0), replicas (1), limit_new_tokens (1024)"),
        (["--limit-new-tokens", "0"], "limit_new_tokens (0) and limit_prompt_tokens (4096)"),
    ],
)
def test_serve_generate_refuses_bad_options(
    tmp_path: Path, options: list[str], message: str
) -> None:
    import onnx

    from tests.onnx.generate_models import successor

    onnx.save(successor(), tmp_path / "decoder.onnx")
    assert message in _refusal(tmp_path, "decoder.onnx", ["--generate", *options])


def test_serve_compiles_a_program_within_its_time_budget(tmp_path: Path) -> None:
    """A program given as text is compiled before Ray starts, under --time-budget."""
    (tmp_path / "m.txt").write_text(PROGRAM)
    stderr = _refusal(tmp_path, "m.txt", ["--time-budget", "1e-9"])
    assert "the compile ran out of its time budget of 1e-09 s" in stderr


def _refusal(folder: Path, file: str, options: list[str]) -> str:
    """The one-line error of a serve command that must not start: its stderr."""
    proc = subprocess.run(
        [sys.executable, "-m", "dynshape", "serve", file, *options],
        cwd=folder,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    return proc.stderr


def test_serve_refuses_a_port_another_server_has(tmp_path: Path) -> None:
    """Said at once, in one line, not as Ray's traceback once it started."""
    import socket

    dynshape.compile(PROGRAM).save(tmp_path / "m.dsx")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        stderr = _refusal(tmp_path, "m.dsx", ["--port", str(port)])
    assert f"--port {port}: 127.0.0.1:{port} cannot be bound" in stderr, stderr
    assert "starting Ray" not in stderr, stderr
