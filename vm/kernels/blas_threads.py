"""BLAS threads per matmul: a policy that holds on a busy machine and keeps results repeatable.

OpenBLAS (numpy's BLAS) splits a GEMM over all its threads once the product is past its own
small threshold (``m * n * k > 65536 * GEMM_MULTITHREAD_THRESHOLD``, 262,144 by default). On a
quiet 2-core machine two threads pay from there up (0.6-1.0x of one thread's time). When another
process uses a core they collapse: the second thread waits a scheduler quantum for a core at
each synchronisation, and a (256, 32) x (32, 128) product took 12 ms with two threads against
64 us with one (188x; ``design/vm.md``, "BLAS threads on a busy machine", has the table). No
fixed size rule is right for both machines, and which one a user has can change from one minute
to the next. The ``adaptive`` policy makes the choice per call, from measurements:

* a matmul of per-matrix work ``m * k * n`` at most ``LOW`` runs as numpy runs it (OpenBLAS is
  single-threaded there already, and the timing would cost more than it could save);
* above it, the work's power of two (its *bucket*) keeps two running estimates of seconds per
  unit of work: with one BLAS thread and with the process's setting. Each call runs the mode
  whose estimate is lower and measures itself; the other mode is tried again after a pause that
  doubles each time it loses (``vm/adaptive_choice.py``: 0.25 up to 16 seconds) and restarts when it
  wins. On a quiet machine that is two threads, probed rarely; under load one thread, with a
  collapsed call at most every ``PROBE_MAX`` seconds per bucket once the load has lasted.

The switch itself: the process's OpenBLAS is found through ``threadpoolctl`` when it is
installed (extra ``blas``), else, on Linux, from the shared objects the process has loaded
(``/proc/self/maps``), so the core install needs nothing but numpy; its
``openblas_set_num_threads`` is then called through ctypes. Without OpenBLAS, with its OpenMP
layer (whose limit is per calling thread), or where the process runs BLAS on one thread already
(Ray sets ``OMP_NUM_THREADS=1`` per replica), nothing is switched.

Threads: the thread count is process-wide, so calls from several Python threads share one
counter under a lock: the first single-thread call saves and lowers it, the last one restores
it. A matmul meant for two threads that runs while a one-thread call is in flight thus runs on
one: that changes its speed, and its result only within float rounding (OpenBLAS partitions the
work differently on 1 and 2 threads), as any change of ``OPENBLAS_NUM_THREADS`` does.

Results and the default. OpenBLAS partitions a GEMM differently on one and on two threads, and
the results differ in the last bits (measured: (8, 512, 512) and (128, 128, 128) float32 are not
bit for bit equal). A policy that changes the thread count from call to call thus gives the same
call different bits as the load changes, and a VM shared by threads different bits than alone.
So the default, ``one``, runs every matmul above ``LOW`` on one BLAS thread: the same bits on
every call, no collapse on a busy machine, at the price of the second core on a quiet one for
large products (two threads took 0.6-0.9x of one thread's time from 2^24 up). ``adaptive`` (the
rule above) takes that price back where bit-for-bit repeatability does not matter, and
``process`` leaves BLAS alone: ``set_policy(name)`` chooses, for the whole process, as BLAS's
thread count is process-wide.

Switching costs: each ``openblas_set_num_threads`` call takes a few microseconds (lowering
and restoring around one product cost 6.5-8 us on top of it, measured: a (128, 1152) x
(1152, 4) product 47 us inside a lowered span, 54 us switched around it), as much as a small
convolution's product. So a VM call switches at most once (``call_begins`` / ``call_ends``,
which ``VirtualMachine`` calls around each top-level call): the first product above ``LOW``
in the call lowers the thread count, and the call's end restores it; outside a VM call (a
kernel run on its own) each product switches around itself as before.

Cold scratch, once per thread. Single-threaded float32 GEMMs of OpenBLAS 0.3.31 (Haswell
kernels, measured on this 2-core EPYC) ran 1.5-3.8x slower in a process until some larger
product had run in the same thread: (256, 256, 256) 2.85 ms against 0.91, (32, 288) x
(288, 168), a ResNet block's convolution, 228 against 93 us. The cause is the state of the
32 MB scratch buffer OpenBLAS hands the calling thread (an anonymous mapping made on first
use, kept for later calls), not of the call: writing every page of it once (an experiment
that found the mapping) made the same calls as fast, and so did writing only the ~40 KB past
what a (256, 256, 256) product packs; no system call or page fault happens in the slow calls.
Presumably the kernels prefetch into pages never written, and a prefetch to an absent page
costs a page walk every time while creating nothing. A model's own products warm the buffer
too, after a while (a benchmark's first rows ran up to 2x slower, then not). So the first
product of a thread that runs on one BLAS thread is preceded by ``WARM_UP``, one (128, 1024) x
(1024, 1024) product of zeros (~11 ms, once per thread), after which 24 shapes from (1, 256,
256) to (1024, 256, 1024), BERT's (16, 256) x (256, 1024) among them, ran as fast as after
writing the whole buffer (two runs of each); a smaller (64, 512) x (512, 2048) left that one
1.6-2.3x slow. float64 GEMMs showed no such effect.

The second core, under ``one``: a product of at least ``SPLIT_MIN`` work is cut into fixed
parts of its rows, each a single-threaded GEMM, which the calling thread and the process's
worker thread (``vm/worker_thread.py``) take from one iterator. The parts depend on the shapes
only, so the bits stay the same on every call and from every thread; nothing synchronises
inside a GEMM, so a busy core costs at most the wait for one part at the end, not a scheduler
quantum at every step as OpenBLAS's own threads do.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import re
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from ..adaptive_choice import AdaptivePolicy
from ..worker_thread import on_worker_start, shared, use_threads
from . import row_panels

#: At or below this per-matrix work OpenBLAS already runs a GEMM on one thread (65536 *
#: GEMM_MULTITHREAD_THRESHOLD): nothing to choose, and timing the call would cost ~0.3 us.
LOW = 65536 * 4

POLICIES = ("adaptive", "process", "one")

#: From this much work a call (``m * k * n`` over the whole batch: ~0.3 ms on one thread here),
#: the ``one`` policy cuts a product into ``SPLIT_PARTS`` parts of its batch or of its rows (a
#: multiple of ``SPLIT_ALIGN`` rows), each one single-threaded GEMM, which the calling thread
#: and the worker thread share (``_split``). 2^24 since the adaptive choice measures afresh
#: (session 29; 2^25 before): quiet, in process, against 2^25, BERT mid and large 0.93-0.95x,
#: MLP batch 256 0.97x, speech large 0.97x, the GPT-2 step large 0.97x, the others 0.99-1.01x;
#: with a competing process 1.02-1.06x over a two-second test (the choice learning that help
#: does not pay there). 2^23 measured the same as 2^24. 2^25 since session 31 (a Xeon microVM,
#: where waking the worker costs 43-90 us): products of 2^24 split in four parts took 1.41x
#: one thread's time at (128, 1152) x (1152, 128) and 1.24x at (256, 256, 256) (each part
#: packs the whole weight again for 32-64 rows); in process, 2^24 against 2^26, ResNet-18
#: large 0.92x, the MLP at batch 256 0.92x, the others 0.97-1.01x; 2^25 measured as 2^26.
SPLIT_MIN = 1 << 25
#: Products with less work are split too when they read at least this many bytes of operands
#: (``_streams``): a weight streamed from memory for a few columns (a small plane's
#: convolution by 9 MB of weights, four columns) takes as long as a product of far more work,
#: and each part then reads its own rows or columns of it. One thread against the split, the
#: weights cold (eight of them in turn): (512, 4608) x (4608, 4) 0.78x, x 9 0.72x, x 36 0.68x,
#: (256, 2304) x (2304, 4) 0.87x, (1024, 256) x (256, 8) 0.85x, (128, 1152) x (1152, 16) 0.88x;
#: a single column did not gain ((512, 4608) x 4608: 0.97x; (1000, 512) x 512: 1.68x).
SPLIT_MIN_BYTES = 1 << 21
SPLIT_PARTS = 4
SPLIT_ALIGN = 16

#: The product ``lower`` runs once per thread (float32 zeros, ``(m, k) x (k, n)``) so that the
#: thread's OpenBLAS scratch pages exist before its own products use them (module doc).
WARM_UP = (128, 1024, 1024)

#: The products of two matrices ``matmul`` leaves to ``np.dot`` (float32, float64; ``out``
#: contiguous and aligned, as ``np.dot`` requires): the same BLAS call and bits as
#: ``np.matmul`` (12,012 shapes from 1 to 1,000 rows, columns and depth, both operands'
#: orders, one and two OpenBLAS threads, SkylakeX and Haswell kernels, misaligned operands:
#: all equal) for 0.1-0.35 us less a call, 1.2 us less at a depth of 1 (np.matmul's (576, 1) x
#: (1, 1): 1.9 against 0.7 us), which is what a MobileNet's squeeze-excite and small 1x1
#: convolutions multiply (session 42).
_DOT_DTYPES = frozenset((np.dtype(np.float32), np.dtype(np.float64)))
_BLAS_DTYPES = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128))


class _Switch:
    """Lowers OpenBLAS to one thread while at least one caller is inside ``enter``/``leave``."""

    def __init__(self, get: Callable[[], int], set_: Callable[[int], None]) -> None:
        self._get = get
        self._set = set_
        self._lock = threading.Lock()
        self._inside = 0
        self._saved = 1

    def threads(self) -> int:
        """The process's BLAS thread count (its own setting while nobody is inside)."""
        with self._lock:
            return self._saved if self._inside else int(self._get())

    def enter(self) -> None:
        with self._lock:
            if self._inside == 0:
                self._saved = int(self._get())
                if self._saved > 1:
                    self._set(1)
            self._inside += 1

    def leave(self) -> None:
        with self._lock:
            self._inside -= 1
            if self._inside == 0 and self._saved > 1:
                self._set(self._saved)


def _symbol(dynlib: Any, name: str) -> Any:
    """OpenBLAS's function ``name`` in ``dynlib``, under any of its builds' decorations
    (``scipy_`` prefix, ``64_`` suffix of the ILP64 builds), or None."""
    for prefix in ("", "scipy_"):
        for suffix in ("", "64_", "_64"):
            found = getattr(dynlib, f"{prefix}{name}{suffix}", None)
            if found is not None:
                return found
    return None


def _openblas_by_threadpoolctl() -> list[Any] | None:
    """The loaded OpenBLAS libraries with the pthreads layer, as threadpoolctl finds them (None
    when threadpoolctl is not installed or fails)."""
    try:
        threadpoolctl: Any = importlib.import_module("threadpoolctl")
        controllers = threadpoolctl.ThreadpoolController().select(internal_api="openblas")
    except Exception:  # not installed, or it failed to inspect the process
        return None
    return [
        lib.dynlib
        for lib in controllers.lib_controllers
        if getattr(lib, "threading_layer", None) == "pthreads" and hasattr(lib, "dynlib")
    ]


def _openblas_by_maps() -> list[Any]:
    """The OpenBLAS shared objects this process has loaded (Linux: ``/proc/self/maps``), opened
    without loading anything new; those built with OpenMP are left out (see the module doc)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            maps = f.read()
    except OSError:
        return []
    libs = []
    for path in sorted(set(re.findall(r"(/\S*openblas\S*\.so[^\s/]*)$", maps, re.MULTILINE))):
        try:
            dynlib = ctypes.CDLL(path, mode=getattr(os, "RTLD_NOLOAD", 0) | ctypes.RTLD_GLOBAL)
        except OSError:
            continue
        parallel = _symbol(dynlib, "openblas_get_parallel")
        # openblas_get_parallel: 0 sequential, 1 pthreads, 2 OpenMP.
        if parallel is not None and parallel() == 1:
            libs.append(dynlib)
    return libs


def _openblas_dynlibs() -> list[Any]:
    """The loaded OpenBLAS libraries with the pthreads layer (threadpoolctl's view, else
    ``/proc/self/maps``)."""
    dynlibs = _openblas_by_threadpoolctl()
    return _openblas_by_maps() if dynlibs is None else dynlibs


def _find_switch() -> _Switch | None:
    """The switch for the loaded OpenBLAS (pthreads layer), or None."""
    for dynlib in _openblas_dynlibs():
        get = _symbol(dynlib, "openblas_get_num_threads")
        set_ = _symbol(dynlib, "openblas_set_num_threads")
        if get is not None and set_ is not None:
            return _Switch(get, set_)
    return None


#: OpenBLAS's cores whose float32 GEMM has the "direct" kernel (``row_panels``).
DIRECT_SGEMM_CORES = frozenset({"skylakex", "cooperlake", "sapphirerapids"})


def _corename() -> str:
    """The core OpenBLAS runs its kernels for (``openblas_get_corename``, lower case), or ""
    where no OpenBLAS with the pthreads layer is loaded or it does not say."""
    for dynlib in _openblas_dynlibs():
        get = _symbol(dynlib, "openblas_get_corename")
        if get is not None:
            get.restype = ctypes.c_char_p
            name = get()
            return name.decode("ascii", "replace").lower() if name else ""
    return ""


_policy = "one"
_warm = threading.local()  # ``done``: this thread's scratch has been warmed (``lower``)
_adaptive = AdaptivePolicy()
#: Per thread: ``depth``, how many VM calls are running in it (nested ones too), and ``held``,
#: the switch its outermost call lowered (None until a product above ``LOW``).
_calls = threading.local()
_switch: _Switch | None = None
#: Whether ``row_panels`` may run products (found with the switch: ``direct_sgemm``).
_direct = False
_looked = False
_look_lock = threading.Lock()


def set_policy(name: str) -> None:
    """Chooses how matmuls pick BLAS threads, for the whole process: ``one`` (the default: one
    thread above ``LOW``, the same bits on every call), ``adaptive`` (by measured speed; the
    bits may change with the load) or ``process`` (as numpy runs them). A ValueError names the
    choices for anything else."""
    global _policy
    if name not in POLICIES:
        raise ValueError(f"BLAS thread policy must be one of {', '.join(POLICIES)}, got {name!r}")
    _policy = name


def policy() -> str:
    """The process's BLAS thread policy (see ``set_policy``)."""
    return _policy


def switch() -> _Switch | None:
    """The process's switch, found on first use (None when switching is unavailable)."""
    global _switch, _looked, _direct
    if not _looked:
        with _look_lock:
            if not _looked:
                _switch = _find_switch()
                _direct = _switch is not None and _corename() in DIRECT_SGEMM_CORES
                _looked = True
    return _switch


def direct_sgemm() -> bool:
    """Whether the process's OpenBLAS has the direct float32 kernel that ``row_panels`` uses
    (its core is one of ``DIRECT_SGEMM_CORES``) and can be switched to one thread."""
    switch()
    return _direct


def lower(sw: _Switch) -> None:
    """``sw.enter()`` for a product on one BLAS thread, the thread's first one preceded by
    ``WARM_UP`` (see the module doc); the caller calls ``sw.leave()`` after its products."""
    sw.enter()
    if not getattr(_warm, "done", False):
        _warm.done = True
        _warm_up()


def _warm_up() -> None:
    """One ``WARM_UP`` product of zeros on the calling thread (its result is dropped)."""
    m, k, n = WARM_UP
    np.matmul(np.zeros((m, k), np.float32), np.zeros((k, n), np.float32))


def _warm_worker() -> None:
    """The worker thread's warm-up, when it starts (``worker_thread.on_worker_start``): its
    first product split with the caller (``_split``) would otherwise pay it, and that call's
    time would make sharing look 3.5-4.4x slower than it is."""
    sw = switch()
    if sw is not None and _policy != "process":
        lower(sw)
        sw.leave()


on_worker_start(_warm_worker)


def call_begins() -> None:
    """A VM call starts on this thread: its products may keep OpenBLAS lowered to one thread
    until ``call_ends`` (see the module doc). Calls nest."""
    _calls.depth = getattr(_calls, "depth", 0) + 1


def call_ends() -> None:
    """The VM call ``call_begins`` announced ends: the outermost one restores the thread count
    its products lowered."""
    depth = _calls.depth - 1
    _calls.depth = depth
    if depth == 0:
        held = getattr(_calls, "held", None)
        if held is not None:
            _calls.held = None
            held.leave()


def _work(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> tuple[int, int]:
    """``np.matmul(a, b, out=out)``'s per-matrix work ``m * k * n`` and its total over the batch
    (``out.size * k``); (0, 0) where BLAS is not used (other dtypes)."""
    if a.dtype not in _BLAS_DTYPES or a.ndim < 1 or b.ndim < 1:
        return 0, 0
    m = int(a.shape[-2]) if a.ndim >= 2 else 1
    n = int(b.shape[-1]) if b.ndim >= 2 else 1
    k = int(a.shape[-1])
    return m * k * n, int(out.size) * k


def matmul(
    a: np.ndarray, b: np.ndarray, out: np.ndarray, kept: row_panels.KeptPanels | None = None
) -> None:
    """``np.matmul(a, b, out=out)``, on the number of BLAS threads the policy chooses; under
    the ``one`` policy a product of a few rows goes by column panels of ``b`` (``row_panels``;
    ``kept``: the caller's kept panels of a constant ``b``)."""
    sa, sb = a.shape, b.shape
    if len(sa) >= 2 and len(sb) >= 2 and sa[-2] * sa[-1] * sb[-1] <= LOW:
        # the common small product: nothing to choose (see LOW); of two matrices, by np.dot
        dt = a.dtype
        if (
            len(sa) == 2 == len(sb)
            and out.flags.carray  # contiguous, aligned, writeable: np.dot's condition on out
            and dt in _DOT_DTYPES
            and dt == b.dtype == out.dtype
        ):
            np.dot(a, b, out)
            return
        np.matmul(a, b, out=out)
        return
    per_matrix, total = _work(a, b, out)
    sw = switch() if per_matrix > LOW and _policy != "process" else None
    if sw is None:
        np.matmul(a, b, out=out)
        return
    if _policy == "one":
        w = row_panels.width(a, b, out) if _direct else 0
        panelled = row_panels.prepare(a, b, out, w, kept) if w else None
        if panelled is not None:
            if total >= SPLIT_MIN and panelled.laid.shape[0] >= SPLIT_PARTS and use_threads():
                # a large product of a few rows: its panels shared with the worker thread
                _split(panelled.rows, panelled.laid, panelled.grid, sw, total)
                if panelled.tail is not None:
                    _lowered(sw, lambda: _tail(panelled))
                return
            _lowered(sw, lambda: row_panels.run(panelled))
            return
        if (total >= SPLIT_MIN or _streams(a, b, out)) and _splittable(a, b, out):
            _split(a, b, out, sw, total)
            return
        _lowered(sw, lambda: np.matmul(a, b, out=out))
        return
    clock = _adaptive.clock
    bucket = per_matrix.bit_length()
    start = clock()
    one = _adaptive.one_thread(bucket, start)
    if one:
        lower(sw)
        try:
            np.matmul(a, b, out=out)
        finally:
            sw.leave()
    else:
        np.matmul(a, b, out=out)
    end = clock()
    _adaptive.record(bucket, one, (end - start) / total, end)


def _lowered(sw: _Switch, product: Callable[[], Any]) -> None:
    """``product()`` with OpenBLAS on one thread: lowered until the VM call ends inside one
    (``call_begins``), else around the product."""
    if getattr(_calls, "depth", 0):
        if getattr(_calls, "held", None) is None:
            lower(sw)
            _calls.held = sw
        product()
        return
    lower(sw)
    try:
        product()
    finally:
        sw.leave()


def _tail(done: row_panels.Panelled) -> None:
    """The product of a panelled product's last columns (``row_panels.prepare``)."""
    if done.tail is not None:
        np.matmul(done.rows, done.tail, out=done.rest)


def _streams(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> bool:
    """Whether the product reads at least ``SPLIT_MIN_BYTES`` of operands for an output of at
    least two rows and two columns (a matrix-vector product gained nothing: ``SPLIT_MIN_BYTES``)."""
    return a.nbytes + b.nbytes >= SPLIT_MIN_BYTES and min(out.shape[-2:]) >= 2


def _splittable(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> bool:
    """Whether ``_split`` may run this product: a batch, rows or columns to cut, and no operand
    that overlaps ``out`` (a part's rows would be written while another part reads them)."""
    return (
        a.ndim >= 2
        and b.ndim >= 2
        and (
            (out.ndim >= 3 and out.shape[0] >= SPLIT_PARTS)
            or max(out.shape[-2], out.shape[-1]) >= 2 * SPLIT_ALIGN
        )
        and use_threads()
        and not np.may_share_memory(out, a)
        and not np.may_share_memory(out, b)
    )


def _split(a: np.ndarray, b: np.ndarray, out: np.ndarray, sw: _Switch, work: int) -> None:
    """``np.matmul(a, b, out=out)`` as single-threaded GEMMs over fixed parts, taken by the
    calling thread and the worker thread from one iterator (``vm/worker_thread``): parts of
    the outermost batch axis when it has ``SPLIT_PARTS`` entries (a convolution's images: each
    part reads only its own im2col rows), else of the rows, or of the columns where the output
    has more columns than rows (each part then reads its own columns of the right operand,
    where parts of the rows would each read all of it: a small plane's convolution by a 9 MB
    weight, (36, 4608) x (4608, 512), 3.0 -> 1.1 ms with the worker).

    Both cores work on a quiet machine, where OpenBLAS's own two threads would collapse on a
    busy one (they synchronise inside every GEMM; a part is waited for at most once, at the
    end). The parts depend on the shapes only and each is one single-threaded GEMM, so a call
    gives the same bits whichever thread computes which part, loaded or not (the ``one``
    policy's promise), though not necessarily the bits of one unsplit GEMM."""
    if out.ndim >= 3 and out.shape[0] >= SPLIT_PARTS:
        batch = out.shape[0]
        step = -(-batch // SPLIT_PARTS)

        def cut(x: np.ndarray, i: int) -> np.ndarray:
            # an operand without the axis, or with it as 1, is read whole by broadcasting
            return x[i : i + step] if x.ndim == out.ndim and x.shape[0] == batch else x

        def part(i: int) -> None:
            np.matmul(cut(a, i), cut(b, i), out=out[i : i + step])

        starts = iter(range(0, batch, step))
    elif out.shape[-1] > out.shape[-2]:
        # More columns than rows (few images or tokens by a large weight): each part reads
        # all of the left operand and its own columns of the right one, where parts of the
        # rows would each read all of the (larger) right operand
        cols = out.shape[-1]
        step = -(-cols // SPLIT_PARTS)
        step = -(-step // SPLIT_ALIGN) * SPLIT_ALIGN

        def part(i: int) -> None:
            np.matmul(a, b[..., i : i + step], out=out[..., i : i + step])

        starts = iter(range(0, cols, step))
    else:
        rows = out.shape[-2]
        step = -(-rows // SPLIT_PARTS)
        step = -(-step // SPLIT_ALIGN) * SPLIT_ALIGN

        def part(i: int) -> None:
            np.matmul(a[..., i : i + step, :], b, out=out[..., i : i + step, :])

        starts = iter(range(0, rows, step))

    def parts() -> None:
        lower(sw)
        try:
            for i in starts:
                part(i)
        finally:
            sw.leave()

    shared(parts, "matmul", work)
