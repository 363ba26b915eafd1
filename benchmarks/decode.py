"""Autoregressive decoding with a KV cache: dynshape against onnxruntime on the same loop.

    python benchmarks/decode.py              # batch 1 and 4, prompt 8, up to past length 2,048
    python benchmarks/decode.py --quick      # CI smoke: batch 1, up to past 64

The model is the Llama-style decoder step of ``examples/exported/families.py`` (RMSNorm, rotary
embeddings, grouped-query attention, ``past_key_values.{i}.key/value`` inputs and
``present.{i}.key/value`` outputs, as PyTorch's exporter writes them). Both runtimes run the
same greedy loop: a prefill of the prompt with an empty cache (past length 0), then one token a
step, each step's ``present`` fed back as the next ``past`` (dynshape donates it:
``run(..., donate=...)``). onnxruntime concatenates the cache into a new buffer every step;
dynshape appends in place (design/memory.md, "Appends"). The two loops run in lockstep, a step
of each in turn, so both meet the same machine at each past length.

Per row (a batch size and a past length): the median time per token over the steps just
before that past length, for each runtime and their ratio; dynshape's bytes copied by appends
per step, averaged over every decode step up to that past length (the amortised cost), and the
bytes its allocator was asked for by the step that reached it. Three ways to run it: as
exported (a cache that outgrows its room moves to twice the room); as exported with the room
given by the caller (``reserved``: the empty cache made by ``vm.with_room`` for the last past
length, as ``dynshape.generate`` makes it from ``max_new_tokens``: nothing moves); and compiled
with the lengths declared, ``past_seq <= 2047`` and ``seq <= 8`` (``dynshape.onnx.load(dims=
...)``: the room is the bound, allocated at the prefill). The two loops must give the same
tokens (checked). Targets (issue 30): bytes appended per step at past 2,048 within
1.1x of those at past 16; per-token time at past >= 1,024 no more than onnxruntime's.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "exported"))

PROMPT = 8
#: Past lengths reported; each row's window is the steps ending there.
POINTS = (16, 256, 1024, 2048)
QUICK_POINTS = (16, 64)
WINDOW = 9  # steps whose median time a row reports

Runner = Callable[[dict[str, np.ndarray]], Sequence[np.ndarray]]


def _cache_names(inputs: Sequence[str]) -> list[str]:
    return [n for n in inputs if n.startswith("past_key_values.")]


Trace = tuple[list[int], list[float], list[tuple[int, int]]]


def decode(
    runs: Sequence[Runner],
    inputs: Sequence[str],
    kv_shape: tuple[int, int],
    batch: int,
    last_past: int,
    stats: Sequence[Callable[[], tuple[int, int]] | None] = (),
    rooms: Sequence[int] = (),
) -> list[Trace]:
    """Greedy tokens, seconds per step and (bytes appended, bytes requested) after each step
    of one loop per runner, each ending when its cache holds ``last_past`` positions. The
    loops advance in lockstep, one step of each in turn (the order alternating), so that a
    change in the machine's speed meets both at the same past length. ``rooms[i]``: runner
    ``i``'s empty cache comes with room for that many positions (``vm.with_room``, as
    ``dynshape.generate`` makes it); 0 or absent: none."""
    from vm import with_room

    rng = np.random.default_rng(0)
    past_names = _cache_names(inputs)
    heads, dh = kv_shape
    prompt = rng.integers(1, 1000, (batch, PROMPT), dtype=np.int64)
    counts = list(stats) + [None] * (len(runs) - len(stats))
    room = list(rooms) + [0] * (len(runs) - len(rooms))
    empty = np.zeros((batch, heads, 0, dh), np.float32)
    states: list[dict[str, Any]] = [
        {
            "ids": prompt,
            "length": 0,
            "cache": {n: with_room(empty, 2, room[i]) if room[i] else empty for n in past_names},
        }
        for i in range(len(runs))
    ]
    traces: list[Trace] = [([], [], []) for _ in runs]
    step = 0
    while states[0]["length"] < last_past:
        order = range(len(runs)) if step % 2 == 0 else reversed(range(len(runs)))
        for i in order:
            state, (tokens, seconds, counters) = states[i], traces[i]
            ids, length = state["ids"], state["length"]
            seq = ids.shape[1]
            feeds = {
                "input_ids": ids,
                "attention_mask": np.ones((batch, length + seq), np.int64),
                "position_ids": np.broadcast_to(
                    np.arange(length, length + seq), (batch, seq)
                ).copy(),
                **state["cache"],
            }
            t0 = time.perf_counter()
            out = runs[i](feeds)
            seconds.append(time.perf_counter() - t0)
            state["ids"] = out[0][:, -1].argmax(-1).reshape(batch, 1).astype(np.int64)
            tokens.append(int(state["ids"][0, 0]))
            state["cache"] = dict(zip(past_names, out[1:], strict=True))
            state["length"] = length + seq
            counter = counts[i]
            counters.append(counter() if counter is not None else (0, 0))
        step += 1
    return traces


def _row(
    past: int, seconds: Sequence[float], counters: Sequence[tuple[int, int]]
) -> tuple[float, float, float]:
    """(median seconds per token, bytes appended per step, bytes requested per step) at
    ``past``: step k ends with the cache holding PROMPT + k positions. Bytes are averaged over
    every decode step up to ``past`` (the prefill's excluded): the amortised cost."""
    end = past - PROMPT  # the step that ends at this past length
    window = seconds[max(1, end - WINDOW + 1) : end + 1]
    appended = (counters[end][0] - counters[0][0]) / end
    requested = (counters[end][1] - counters[end - 1][1]) / 1
    return float(np.median(window)), appended, requested


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="batch 1, up to past 64")
    args = parser.parse_args(argv)
    try:
        import onnx
        import onnxruntime as ort
    except ImportError:
        print("decode.py needs the onnx extra: pip install -e '.[onnx]'")
        return 0
    import families

    import dynshape
    import dynshape.onnx
    from vm import VirtualMachine

    model = families.llama_decoder_step()
    points = QUICK_POINTS if args.quick else POINTS
    batches = (1,) if args.quick else (1, 4)
    declared = {"past_seq": (0, points[-1] - 1), "seq": (1, PROMPT)}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "llama_step.onnx")
        onnx.save(model, path)
        t0 = time.perf_counter()
        exe = dynshape.compile(path)
        compiled = time.perf_counter() - t0
        bounded = dynshape.compile(dynshape.onnx.load(path, dims=declared))
        options = ort.SessionOptions()
        options.intra_op_num_threads = os.cpu_count() or 1
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    inputs = [p.name for p in exe.inputs]
    donated = tuple(_cache_names(inputs))
    kv = next(p.type for p in exe.inputs if p.name.startswith("past_key_values."))
    kv_shape = (int(kv.shape[1]), int(kv.shape[3]))  # type: ignore[union-attr]
    print(f"llama-style decoder step: import + compile {compiled:.2f} s; prompt {PROMPT}")
    print(
        f"{'lengths':>9} {'batch':>5} {'past':>6} {'dynshape':>11} {'ort':>11} {'ratio':>7} "
        f"{'appended/step':>14} {'requested/step':>15}"
    )
    appended_at: dict[tuple[str, int, int], float] = {}
    ratio_at: dict[tuple[str, int, int], float] = {}
    runs = [
        (kind, e, batch)
        for batch in batches
        for kind, e in (("exported", exe), ("reserved", exe), ("declared", bounded))
    ]
    for kind, compiled_exe, batch in runs:
        vm = VirtualMachine(compiled_exe)
        s = vm.allocator.stats

        def run_dyn(feeds: dict[str, np.ndarray], vm: Any = vm) -> Sequence[np.ndarray]:
            out: Sequence[np.ndarray] = vm.run(feeds, donate=donated)
            return out

        def run_ort(feeds: dict[str, np.ndarray]) -> Sequence[np.ndarray]:
            out: Sequence[np.ndarray] = session.run(None, feeds)
            return out

        def counters(s: Any = s) -> tuple[int, int]:
            return s.bytes_appended, s.bytes_requested

        room = points[-1] if kind == "reserved" else 0
        (tok_d, sec_d, cnt), (tok_o, sec_o, _) = decode(
            (run_dyn, run_ort), inputs, kv_shape, batch, points[-1], (counters,), (room,)
        )
        if tok_d != tok_o:
            print(f"  batch {batch}: WRONG: the tokens differ from onnxruntime's")
            return 1
        for past in points:
            d, appended, requested = _row(past, sec_d, cnt)
            o = _row(past, sec_o, cnt)[0]
            appended_at[kind, batch, past], ratio_at[kind, batch, past] = appended, d / o
            print(
                f"{kind:>9} {batch:>5} {past:>6} {d * 1e6:>9.0f}us {o * 1e6:>9.0f}us "
                f"{d / o:>6.2f}x {appended:>14,.0f} {requested:>15,.0f}"
            )
        steps = len(sec_d) - 1
        print(
            f"  {kind}, batch {batch}: {batch * steps / sum(sec_d[1:]):,.0f} tokens/s dynshape, "
            f"{batch * steps / sum(sec_o[1:]):,.0f} onnxruntime (decode steps, prefill excluded)"
        )
    print("targets")
    first, last = points[0], points[-1]
    for kind, _, batch in runs:
        growth = appended_at[kind, batch, last] / appended_at[kind, batch, first]
        verdict = "met" if growth <= 1.1 else "MISSED"
        print(
            f"  {kind}, batch {batch}: bytes appended per step at {last} / at {first}: "
            f"{growth:.2f}x (<= 1.1x) {verdict}"
        )
        for past in (p for p in points if p >= 1024):
            r = ratio_at[kind, batch, past]
            verdict = "met" if r <= 1.0 else "MISSED"
            print(
                f"  {kind}, batch {batch}, past {past}: dynshape / ort {r:.2f}x (<= 1x) {verdict}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
