"""The command-line interface: ``python -m dynshape`` or ``dynshape``.

    dynshape demo
    dynshape compile FILE --emit {parsed,types,rewritten,fused,anf,manifest,bytecode} [-o OUT]
    dynshape compile FILE -o OUT.dsx [--time-budget SECONDS]   (save the executable)
    dynshape run FILE|EXECUTABLE --input x=3,4 --input y=y.npy [-o out.npz] [--stats|--profile]
                 [--profile-trace trace.json]
    dynshape explain FILE [--bind n=128 ...] [--svg out.svg]   (the memory report)
    dynshape import MODEL.onnx|MODEL.pt2 [-o OUT.txt] [--dim batch=1:64 ...] [--stats]
                    [--time-budget S]
    dynshape generate DECODER.onnx|EXECUTABLE --prompt-ids 1,2,3 [--prompt-ids 4,5 ...]
                      --max-new-tokens 32 [--eos-token-id 2] [--sample [--temperature T]
                      [--top-k K] [--seed S]] [--dim ...]
    dynshape serve MODEL.dsx|MODEL.onnx|PROGRAM [--batch-symbol batch] [--pad seq=0]
                   [--max-batch 64] [--replicas 2] [--threads 2] [--port N] [--name NAME]
                   [--min-replicas 1 --max-replicas 4 [--target-requests 2]] [--retries 3]
                   [--metrics-port N] [--max-steps N] [--timeout SECONDS]
                   [--time-budget SECONDS] [--dim ...]
    dynshape serve DECODER.onnx|EXECUTABLE --generate [--max-batch 64] [--replicas N]
                   [--limit-new-tokens 1024] [--limit-prompt-tokens 4096] [--port N] ...
                   (POST /v2/models/NAME/generate_stream: tokens as server-sent events)

``compile``, ``run`` and ``explain`` take an ONNX model (``.onnx``) or a torch.export program
(``.pt2``, saved by ``torch.export.save``) wherever they take program
text; ``--dim`` (repeatable) renames, fixes or bounds its dim names there too. ``--import
MODULE`` (repeatable) imports a module first, the one that registers custom ops. The common
options (``--full-errors``, ``--import``) go before or after the subcommand.

Errors of ours (bad files, bad programs, bad arguments) are reported in one line with a non-zero
exit status, never as a traceback; ``--full-errors`` shows the whole message (the source line
with a caret, the function with the failing expression marked). A reader that closes the pipe
(``| head``) ends the command quietly.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dynshape_errors import DynShapeError
from ir import Module
from vm import Executable, VirtualMachine
from vm.executable import TensorSpec, TypeSpec
from vm.serialize import MAGIC

from .demo import run_demo
from .errors import CompileError, CompileTimeoutError
from .pipeline import STAGES, CompileReport, compile, stages
from .serve.budgets import (
    DEFAULT_COMPILE_BUDGET_S as DEFAULT_SERVE_COMPILE_BUDGET_S,
)
from .serve.budgets import DEFAULT_MAX_STEPS as DEFAULT_SERVE_MAX_STEPS
from .serve.budgets import DEFAULT_RETRIES, LIMIT_NEW_TOKENS, LIMIT_PROMPT_TOKENS
from .serve.budgets import DEFAULT_TIMEOUT_S as DEFAULT_SERVE_TIMEOUT_S
from .serve.scaling import DEFAULT_TARGET_REQUESTS as DEFAULT_TARGET

EMIT_CHOICES = (*STAGES, "bytecode")


#: Results up to this many elements are printed whole by ``run`` (numpy's own default is 1000).
PRINT_ELEMENTS = 1000

DESCRIPTION = (
    "dynshape: compile tensor programs with symbolic dimensions once, run them on any shapes."
)


def _common_options(parser: argparse.ArgumentParser, top: bool) -> None:
    """The options every command takes, before or after its name (two destinations, merged
    by ``_options``: argparse lets a subcommand's defaults overwrite the top level's)."""
    where = "top" if top else "sub"
    parser.add_argument(
        "--full-errors",
        dest=f"full_errors_{where}",
        action="store_true",
        help="print whole error messages, not one line",
    )
    parser.add_argument(
        "--import",
        dest=f"imports_{where}",
        action="append",
        default=[],
        metavar="MODULE",
        help="import this module first (the one that registers custom ops); repeatable",
    )


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dynshape", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"dynshape {_version()}")
    _common_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        _common_options(p, top=False)
        return p

    command("demo", "the seed program through every stage, run against numpy")

    comp = command("compile", "compile a program; print a stage or save it")
    comp.add_argument(
        "file", help="a program in the text format, an ONNX model (.onnx) or a torch.export .pt2"
    )
    _dim_option(comp)
    comp.add_argument("--emit", choices=EMIT_CHOICES, help="print the program after this stage")
    comp.add_argument("-o", "--output", help="write here (the executable, without --emit)")
    _time_budget_option(comp)

    run = command("run", "run a program or a saved executable")
    run.add_argument("file", help="a program (text, .onnx or .pt2), or a saved executable")
    _dim_option(run)
    run.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=SHAPE|NAME=FILE.npy",
        help="an argument: random data of a shape (x=3,4; a scalar is x=) or a .npy file",
    )
    run.add_argument("--function", default="main", help="the function to run (default main)")
    run.add_argument("--seed", type=int, default=0, help="seed for random inputs")
    run.add_argument("-o", "--output", metavar="FILE.npz", help="save the results (np.load)")
    run.add_argument("--stats", action="store_true", help="print the allocator's statistics")
    run.add_argument("--profile", action="store_true", help="print the profiler's table")
    run.add_argument(
        "--profile-trace",
        metavar="TRACE.json",
        help="write a Chrome trace of the run (one event per instruction and kernel call, with "
        "shapes; open it in Perfetto or chrome://tracing)",
    )

    explain = command("explain", "the memory report: peak bytes, plan, layout")
    explain.add_argument(
        "file", help="a program in the text format, an ONNX model (.onnx) or a torch.export .pt2"
    )
    _dim_option(explain)
    explain.add_argument(
        "--bind",
        action="append",
        default=[],
        metavar="NAME=INT",
        help="a symbol's value, to evaluate the formulas (n=128); repeatable; with one, "
        "every symbol must be given",
    )
    explain.add_argument("--function", help="only this function (default: all)")
    explain.add_argument("--svg", help="draw the layout of the function (main) to this file")

    srv = command("serve", "serve an executable on a local Ray Serve application (extra: serve)")
    srv.add_argument(
        "file", help="a saved executable (.dsx), a program (text) or an ONNX model (.onnx)"
    )
    srv.add_argument(
        "--name", help="the model's name in the /v2/models/NAME routes (the file's stem)"
    )
    srv.add_argument(
        "--generate",
        action="store_true",
        help="serve a decoder with its key/value cache for generation: POST "
        "/v2/models/NAME/generate_stream (server-sent events) and .../generate, concurrent "
        "generations joined per decode step (up to --max-batch rows)",
    )
    srv.add_argument(
        "--limit-new-tokens",
        type=int,
        default=LIMIT_NEW_TOKENS,
        metavar="N",
        help=f"with --generate: most tokens one request may ask for ({LIMIT_NEW_TOKENS})",
    )
    srv.add_argument(
        "--limit-prompt-tokens",
        type=int,
        default=LIMIT_PROMPT_TOKENS,
        metavar="N",
        help=f"with --generate: most tokens of one prompt ({LIMIT_PROMPT_TOKENS})",
    )
    srv.add_argument("--batch-symbol", help="batch requests along this symbol (e.g. batch)")
    srv.add_argument("--max-batch", type=int, default=64, help="most rows one call (64)")
    srv.add_argument("--batch-wait", type=float, default=0.005, help="seconds to wait (0.005)")
    srv.add_argument(
        "--pad",
        action="append",
        default=[],
        metavar="SYMBOL=FILL",
        help="let requests that differ in SYMBOL share a call, padded with FILL (seq=0); only "
        "for models a padded position cannot change; repeatable",
    )
    srv.add_argument("--replicas", type=int, help="replicas of the model (1)")
    srv.add_argument(
        "--min-replicas",
        type=int,
        help="autoscale from this many replicas (1; with --max-replicas)",
    )
    srv.add_argument("--max-replicas", type=int, help="autoscale up to this many replicas")
    srv.add_argument(
        "--target-requests",
        type=float,
        metavar="N",
        help=f"autoscale to keep about N requests in flight per replica ({DEFAULT_TARGET:g})",
    )
    srv.add_argument(
        "--retries",
        type=int,
        default=DEFAULT_RETRIES,
        help="send a request again this many times when its replica dies "
        f"({DEFAULT_RETRIES}; then a 503)",
    )
    srv.add_argument(
        "--threads", type=int, default=1, help="calls one replica runs at once on its VM (1)"
    )
    srv.add_argument("--port", type=int, default=8000, help="loopback port (8000; 0: any free)")
    srv.add_argument(
        "--metrics-port",
        type=int,
        default=0,
        help="loopback port of Ray's Prometheus metrics, /metrics (0: any free)",
    )
    srv.add_argument(
        "--max-steps",
        type=int,
        default=DEFAULT_SERVE_MAX_STEPS,
        metavar="N",
        help=f"stop a run past N steps (loops, calls) ({DEFAULT_SERVE_MAX_STEPS:,}; 0: no bound)",
    )
    srv.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_SERVE_TIMEOUT_S,
        metavar="SECONDS",
        help=f"stop a run past SECONDS ({DEFAULT_SERVE_TIMEOUT_S:g}; 0: no bound)",
    )
    _dim_option(srv)
    srv.add_argument(
        "--time-budget",
        type=float,
        default=DEFAULT_SERVE_COMPILE_BUDGET_S,
        metavar="SECONDS",
        help="give up if importing and compiling a program or ONNX model take longer "
        f"({DEFAULT_SERVE_COMPILE_BUDGET_S:g}; 0: no bound)",
    )

    imp = command("import", "import an ONNX model: print (or save) its program")
    imp.add_argument("file", help="an ONNX model (.onnx) or a torch.export program (.pt2)")
    imp.add_argument("-o", "--output", help="write the program text here")
    _dim_option(imp)
    imp.add_argument(
        "--stats",
        action="store_true",
        help="how many node outputs have symbolic shapes; the import and compile time per pass",
    )
    _time_budget_option(imp)
    _generate_parser(command("generate", "decode tokens with a decoder and its key/value cache"))
    return parser


def _generate_parser(gen: argparse.ArgumentParser) -> None:
    gen.add_argument(
        "file", help="an ONNX decoder with past_key_values inputs (.onnx), or a saved executable"
    )
    _dim_option(gen)
    gen.add_argument(
        "--prompt-ids",
        action="append",
        required=True,
        metavar="IDS",
        help="a prompt's token ids, comma-separated (1,2,3); repeat for a batch (prompts of "
        "different lengths are padded on the left and masked)",
    )
    gen.add_argument(
        "--max-new-tokens",
        type=int,
        required=True,
        metavar="N",
        help="the most tokens to add to a prompt",
    )
    gen.add_argument(
        "--eos-token-id",
        metavar="ID[,ID...]",
        help="a row stops at this token (or any of these) and is padded with the first after",
    )
    gen.add_argument("--sample", action="store_true", help="sample (default: greedy)")
    gen.add_argument(
        "--temperature", type=float, default=1.0, metavar="T", help="with --sample (1.0)"
    )
    gen.add_argument(
        "--top-k", type=int, metavar="K", help="with --sample: among the K most likely tokens"
    )
    gen.add_argument(
        "--seed", type=int, metavar="S", help="with --sample: the same seed, the same tokens"
    )


def _time_budget_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--time-budget",
        type=float,
        metavar="SECONDS",
        help="give up (an error naming the pass) if importing and compiling take longer",
    )


def _version() -> str:
    """The installed distribution's version (the CLI does not import the package's face)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dynshape")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def _options(args: argparse.Namespace) -> tuple[bool, list[str]]:
    """``--full-errors`` and the ``--import`` modules, from before and after the subcommand."""
    full = args.full_errors_top or getattr(args, "full_errors_sub", False)
    return full, [*args.imports_top, *getattr(args, "imports_sub", [])]


def _import_modules(names: Sequence[str]) -> None:
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as e:  # the user's module: whatever it raises is reported, named
            raise DynShapeError(f"--import {name}: {type(e).__name__}: {e}") from None


def _dim_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dim",
        action="append",
        default=[],
        metavar="NAME=SPEC",
        help="for an ONNX model: fix (batch=1), bound (seq=1:512, seq=8:) or rename (batch=b) "
        "a dim name; repeatable",
    )


def _dims(specs: Sequence[str]) -> dict[str, int | str | tuple[int, int | None]]:
    """``--dim`` values as ``dynshape.onnx.load``'s ``dims=``."""
    out: dict[str, int | str | tuple[int, int | None]] = {}
    for item in specs:
        name, sep, spec = (part.strip() for part in item.partition("="))
        lo, colon, hi = spec.partition(":")
        try:
            if not sep or not name or not spec:
                raise ValueError
            if colon:
                out[name] = (int(lo), int(hi) if hi else None)
            elif spec.lstrip("-").isdigit():
                out[name] = int(spec)
            elif spec.isidentifier():
                out[name] = spec
            else:
                raise ValueError
        except ValueError:
            raise DynShapeError(
                f"--dim {item!r}: expected NAME=SIZE, NAME=LO:HI (HI may be empty) or NAME=NEWNAME"
            ) from None
    return out


def _is_onnx(path: str) -> bool:
    return path.lower().endswith(".onnx")


def _is_pt2(path: str) -> bool:
    """A torch.export program saved by ``torch.export.save`` (a zip, so it must be told apart
    from a saved executable by its name)."""
    return path.lower().endswith(".pt2")


def _is_model(path: str) -> bool:
    return _is_onnx(path) or _is_pt2(path)


def _source(args: argparse.Namespace) -> Module | str:
    """The program of ``args.file``: an imported ONNX model, or the text."""
    if _is_onnx(args.file):
        from .onnx import load  # the extra, only when asked for

        return load(args.file, dims=_dims(args.dim) or None)
    if _is_pt2(args.file):
        from .torch import load as load_pt2  # the extra, only when asked for

        return load_pt2(args.file, dims=_dims(args.dim) or None)
    if args.dim:
        raise DynShapeError("--dim is for models (.onnx, .pt2); a program's dims are its own")
    return _read_text(args.file)


def _import_cmd(args: argparse.Namespace) -> int:
    if not _is_model(args.file):
        raise DynShapeError(
            f"import takes an ONNX model (.onnx) or a torch.export program (.pt2), got {args.file}"
        )
    t0 = time.perf_counter()
    imported: Any
    if _is_pt2(args.file):
        from .torch import import_program

        imported = import_program(args.file, dims=_dims(args.dim) or None)
    else:
        from .onnx import import_model

        imported = import_model(args.file, dims=_dims(args.dim) or None)
    seconds = time.perf_counter() - t0
    left = _left(args.time_budget, seconds)
    text = str(imported.program) + "\n"
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    elif not args.stats:
        sys.stdout.write(text)
    if args.stats:
        print(imported.format() if _is_pt2(args.file) else imported.stats.format())
        report = CompileReport()  # what a compile of the model would cost, pass by pass
        compile(imported.program, source_name=args.file, time_budget=left, report=report)
        print(f"import: {seconds:.3f} s")
        print(report.format())
    return 0


def _left(budget: float | None, spent: float) -> float | None:
    """The time budget left for the compile after ``spent`` seconds of import (the import is
    not interruptible: past the budget already, the error names it)."""
    if budget is None:
        return None
    if spent >= budget:
        raise CompileTimeoutError("parsed", "the model import", budget, spent)
    return budget - spent


def _read_text(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise DynShapeError(f"cannot read {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise DynShapeError(f"{path} is neither a program (text) nor an executable") from None


def _compile_cmd(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    text = _source(args)
    budget = _left(args.time_budget, time.perf_counter() - t0)
    if args.emit is None:
        if not args.output:
            raise DynShapeError("compile needs --emit STAGE or -o OUTPUT")
        compile(text, source_name=args.file, time_budget=budget).save(args.output)
        return 0
    if args.emit == "bytecode":
        printed = compile(text, source_name=args.file, time_budget=budget).bytecode
    else:
        printed = str(stages(text, source_name=args.file, time_budget=budget)[args.emit])
    if args.output:
        Path(args.output).write_text(printed + "\n", encoding="utf-8")
    else:
        sys.stdout.write(printed + "\n")
    return 0


def _is_executable(path: str) -> bool:
    """True if ``path`` starts like a saved executable (or any binary file)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False  # the reader of the program says why
    return head.startswith(MAGIC[:5]) or b"\0" in head


def _load_program(args: argparse.Namespace, time_budget: float | None = None) -> Executable:
    """The executable of ``args.file``: loaded if saved, else imported (ONNX) and compiled,
    within ``time_budget`` seconds for both."""
    path = args.file
    t0 = time.perf_counter()
    if not _is_model(path):
        try:
            Path(path).stat()
        except OSError as e:
            raise DynShapeError(f"cannot read {path}: {e.strerror}") from None
        if _is_executable(path):  # binary: an executable, or junk
            return Executable.load(path)
    source = _source(args)
    left = _left(time_budget, time.perf_counter() - t0) if _is_model(path) else time_budget
    return compile(source, source_name=path, time_budget=left)


def _random(spec: TypeSpec, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if not isinstance(spec, TensorSpec):
        raise DynShapeError("random inputs are for tensor parameters; pass a .npy file")
    dtype = np.dtype(spec.dtype)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    return rng.integers(0, 10, shape).astype(dtype)


def _inputs(exe: Executable, args: argparse.Namespace) -> list[object]:
    fn = next((f for f in exe.functions if f.name == args.function), None)
    if fn is None:
        raise DynShapeError(f"the executable has no function {args.function!r}")
    given: dict[str, str] = {}
    for item in args.input:
        name, sep, value = item.partition("=")
        if not sep:
            raise DynShapeError(f"--input {item!r}: expected NAME=SHAPE or NAME=FILE.npy")
        given[name] = value
    names = [p.name for p in fn.params]
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise DynShapeError(
            f"{fn.name} has no parameter {unknown[0]!r} (its parameters: {', '.join(names)})"
        )
    rng = np.random.default_rng(args.seed)
    values: list[object] = []
    for p in fn.params:
        if p.name not in given:
            raise DynShapeError(f"missing --input {p.name}=SHAPE|FILE.npy")
        value = given[p.name]
        if value.endswith(".npy"):
            try:
                values.append(np.load(value, allow_pickle=False))
            except (OSError, ValueError) as e:
                raise DynShapeError(f"--input {p.name}: cannot load {value}: {e}") from None
            continue
        try:
            shape = tuple(int(d) for d in value.split(",") if d.strip())
        except ValueError:
            raise DynShapeError(
                f"--input {p.name}={value}: a shape is comma-separated ints (3,4)"
            ) from None
        values.append(_random(p.type, shape, rng))
    return values


def _results(value: object, name: str = "out") -> dict[str, np.ndarray]:
    """The arrays of a result by name: ``out``, or ``out.0``, ``out.1.0``... for tuples."""
    if isinstance(value, tuple):
        named: dict[str, np.ndarray] = {}
        for i, v in enumerate(value):
            named.update(_results(v, f"{name}.{i}"))
        return named
    return {name: np.asarray(value)}


def _summary(name: str, arr: np.ndarray) -> str:
    text = np.array2string(arr, threshold=PRINT_ELEMENTS, edgeitems=3, precision=4)
    cut = "" if arr.size <= PRINT_ELEMENTS else "  (summarised: -o FILE.npz saves it whole)"
    return f"{name}: {arr.dtype}{list(arr.shape)}{cut}\n{text}"


def _run_cmd(args: argparse.Namespace) -> int:
    exe = _load_program(args)
    vm = VirtualMachine(exe, profile="trace" if args.profile_trace else args.profile)
    value = vm.invoke(args.function, *_inputs(exe, args))
    if args.function == "main" and exe.output_names:  # an imported model's names
        fields = value if isinstance(value, tuple) else (value,)
        results = {n: np.asarray(v) for n, v in zip(exe.output_names, fields, strict=True)}
    else:
        results = _results(value)
    if args.profile_trace:
        try:
            events = vm.write_chrome_trace(args.profile_trace)
        except OSError as e:
            raise DynShapeError(f"cannot write {args.profile_trace}: {e.strerror}") from None
        print(f"wrote {args.profile_trace}: {events} trace events", file=sys.stderr)
    if args.output:
        try:
            with open(args.output, "wb") as f:  # as given: np.savez would add ".npz"
                np.savez(f, **results)  # type: ignore[arg-type]  # numpy stubs type **kwds as bool
        except OSError as e:
            raise DynShapeError(f"cannot write {args.output}: {e.strerror}") from None
    print("\n".join(_summary(n, a) for n, a in results.items()))
    if args.profile:
        print("\n" + vm.profile_report())
    elif args.stats:
        print("\n" + vm.allocator.stats.format())
    return 0


def _explain_cmd(args: argparse.Namespace) -> int:
    from .memory_report import memory_report
    from .svg_layout import layout_svg

    if not _is_model(args.file) and _is_executable(args.file):
        raise DynShapeError(
            f"{args.file} is a compiled executable: it keeps the bytecode, not the memory "
            f"plan's formulas. Explain the program it was compiled from, or measure it: "
            f"dynshape run {args.file} --input ... --stats"
        )
    bindings: dict[str, int] = {}
    for item in args.bind:
        name, sep, value = item.partition("=")
        try:
            bindings[name.strip()] = int(value)
        except ValueError:
            raise DynShapeError(f"--bind {item!r}: expected NAME=INT") from None
        if not sep:
            raise DynShapeError(f"--bind {item!r}: expected NAME=INT")
    report = memory_report(
        _source(args),
        bindings if args.bind or args.svg else None,
        source_name=args.file,
    )
    names = list(report)
    if args.function is not None:
        if args.function not in report:
            raise DynShapeError(f"the program has no function {args.function!r}")
        names = [args.function]
    if args.svg:  # before the report: a closed pipe must not lose the picture
        target = args.function or ("main" if "main" in report else names[0])
        try:
            Path(args.svg).write_text(layout_svg(report[target]), encoding="utf-8")
        except OSError as e:
            raise DynShapeError(f"cannot write {args.svg}: {e.strerror}") from None
    print("\n\n".join(report[n].format() for n in names))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit status."""
    args = _build_parser().parse_args(argv)
    full_errors, imports = _options(args)
    try:
        return _dispatch(args, imports)
    except DynShapeError as e:
        text = str(e) if full_errors else str(e).splitlines()[0]
        kind = "compile error" if isinstance(e, CompileError) else "error"
        print(f"dynshape: {kind}: {text}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader went away (``| head``): nothing more to say, and Python's final flush of
        # stdout must not fail again at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a command its pipe reader ended


def _dispatch(args: argparse.Namespace, imports: Sequence[str]) -> int:
    _import_modules(imports)
    if args.command == "demo":
        return run_demo(sys.stdout)
    if args.command == "compile":
        return _compile_cmd(args)
    if args.command == "explain":
        return _explain_cmd(args)
    if args.command == "import":
        return _import_cmd(args)
    if args.command == "serve":
        return _serve_cmd(args)
    if args.command == "generate":
        return _generate_cmd(args)
    return _run_cmd(args)


def _generate_cmd(args: argparse.Namespace) -> int:
    """Decode, then print each row (its prompt without the padding added here, and its new
    tokens) as comma-separated ids, one row a line: what ``--prompt-ids`` takes back."""
    from .generate_loop import generate
    from .generate_model import DecoderStep

    prompts = [_ids(f"--prompt-ids {text!r}", text) for text in args.prompt_ids]
    eos = None if args.eos_token_id is None else _ids("--eos-token-id", args.eos_token_id)
    # compiled once, before anything is decoded (the model's own errors come first)
    model = DecoderStep.of(VirtualMachine(_load_program(args)))
    width = max(len(p) for p in prompts)
    pad = eos[0] if eos else 0  # any id: the mask hides it
    ids = np.array([[pad] * (width - len(p)) + p for p in prompts], np.int64)
    mask = np.array([[0] * (width - len(p)) + [1] * len(p) for p in prompts], np.int64)
    out = generate(
        model,
        ids,
        args.max_new_tokens,
        attention_mask=mask if not mask.all() else None,
        eos_token_id=eos,
        do_sample=args.sample,
        temperature=args.temperature,
        top_k=args.top_k,
        seed=args.seed,
    )
    for row, prompt in zip(out, prompts, strict=True):
        print(",".join(str(int(t)) for t in row[width - len(prompt) :]))
    return 0


def _ids(what: str, text: str) -> list[int]:
    """Comma-separated token ids (``1,2,3``)."""
    try:
        ids = [int(t) for t in text.split(",")]
    except ValueError:
        raise DynShapeError(f"{what}: token ids are comma-separated ints (1,2,3)") from None
    return ids


def _serve_cmd(args: argparse.Namespace) -> int:
    """Start Ray (this machine's CPUs), serve the executable on 127.0.0.1, print the URL,
    and stop cleanly on Ctrl-C; each start-up step is said on stderr with the seconds spent."""
    from .serve.local import keep_ray_on_loopback
    from .serve.progress import Progress

    if args.generate:
        _generate_options_fit(args)  # before anything slow
    elif (args.limit_new_tokens, args.limit_prompt_tokens) != (
        LIMIT_NEW_TOKENS,
        LIMIT_PROMPT_TOKENS,
    ):
        raise DynShapeError("--limit-new-tokens and --limit-prompt-tokens are for --generate")
    if args.port:
        _port_is_free(args.port)  # before anything slow
    progress = Progress()
    keep_ray_on_loopback()  # before Ray is imported: it reads the switch then
    progress.step("importing Ray Serve")
    try:
        import ray
        from ray import serve

        from .serve.deployment import deployment
        from .serve.generation_server import generation_deployment
    except ImportError as e:
        raise DynShapeError(f"serve needs the extra: pip install -e '.[serve]' ({e})") from None
    budget = args.time_budget or None
    saved = not _is_onnx(args.file) and _is_executable(args.file)
    progress.step(f"loading {args.file}" if saved else f"compiling {args.file}")
    exe = _load_program(args, time_budget=budget)  # compiled once, before Ray starts
    name = args.name if args.name is not None else Path(args.file).stem
    if args.generate:
        app = generation_deployment(
            exe,
            max_rows=args.max_batch,
            limit_new_tokens=args.limit_new_tokens,
            limit_prompt_tokens=args.limit_prompt_tokens,
            replicas=args.replicas or 1,
            model_name=name,
            max_steps=args.max_steps or None,
            timeout_s=args.timeout or None,
            retries=args.retries,
        )
    else:
        app = _inference_app(deployment, exe, name, args)
    # Ray declares serve.shutdown without annotations: named with its type, calling it is typed.
    stop_serve: Callable[[], None] = serve.shutdown
    metrics_port = args.metrics_port or _free_port()
    progress.step(f"starting Ray ({os.cpu_count()} CPUs, on 127.0.0.1)")
    ray.init(
        address="local",  # a Ray of its own, never one another process started on this machine
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        _metrics_export_port=metrics_port,
    )
    try:
        port = _start_http(serve.start, stop_serve, args.port, progress)
        progress.step(f"deploying {name}: {_replicas_said(args)}, each loading the executable")
        serve.run(app, name="dynshape", route_prefix="/")
        progress.step(
            f"ready; counters at http://127.0.0.1:{port}/v2/models/{name}/stats, Ray Serve's "
            f"Prometheus metrics at http://127.0.0.1:{metrics_port}/metrics"
        )
        stop = {signal.SIGINT, signal.SIGTERM}
        signal.pthread_sigmask(signal.SIG_BLOCK, stop)  # delivered to sigwait, not as an error
        url = f"http://127.0.0.1:{port}/"
        route = f"/v2/models/{name}" + ("/generate_stream" if args.generate else "")
        print(f"serving {args.file} at {url} as {route} (Ctrl-C stops)", flush=True)
        signal.sigwait(stop)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stop)
    finally:
        stop_serve()
        ray.shutdown()
    print("stopped", flush=True)
    return 0


def _inference_app(deployment: Callable[..., Any], exe: Any, name: str, args: Any) -> Any:
    """The inference application of ``serve``'s options."""
    return deployment(
        exe,
        batch_symbol=args.batch_symbol,
        pad=_pads(args.pad),
        max_batch=args.max_batch,
        batch_wait_s=args.batch_wait,
        replicas=args.replicas,
        threads=args.threads,
        model_name=name,
        max_steps=args.max_steps or None,
        timeout_s=args.timeout or None,
        min_replicas=args.min_replicas,
        max_replicas=args.max_replicas,
        target_requests=args.target_requests,
        retries=args.retries,
    )


def _generate_options_fit(args: argparse.Namespace) -> None:
    """``--generate`` refuses the options of inference batching and autoscaling by name."""
    given = [
        option
        for option, value in (
            ("--batch-symbol", args.batch_symbol),
            ("--pad", args.pad),
            ("--min-replicas", args.min_replicas),
            ("--max-replicas", args.max_replicas),
            ("--target-requests", args.target_requests),
            ("--threads", args.threads != 1),
        )
        if value
    ]
    if given:
        raise DynShapeError(
            f"{given[0]} is for inference; --generate joins generations per decode step "
            "itself (--max-batch rows, --replicas)"
        )


def _replicas_said(args: argparse.Namespace) -> str:
    """The replicas ``serve`` starts, in words."""
    if args.max_replicas is None:
        return f"{args.replicas or 1} replica(s)"
    return f"{args.min_replicas or 1} to {args.max_replicas} replicas (autoscaling)"


def _pads(specs: Sequence[str]) -> dict[str, float]:
    """``--pad`` values as ``deployment``'s ``pad=``."""
    out: dict[str, float] = {}
    for item in specs:
        name, sep, fill = (part.strip() for part in item.partition("="))
        if not sep or not name.isidentifier():
            raise DynShapeError(f"--pad {item!r}: expected SYMBOL=FILL (seq=0)")
        try:  # an int stays exact (a token id of int64 inputs)
            out[name] = int(fill)
        except ValueError:
            try:
                out[name] = float(fill)
            except ValueError:
                raise DynShapeError(f"--pad {item!r}: FILL {fill!r} is not a number") from None
    return out


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_is_free(port: int) -> None:
    """Raise DynShapeError when ``port`` of 127.0.0.1 cannot be bound (another server has it):
    said at once, not as Ray's traceback after it started."""
    import socket

    with socket.socket() as s:
        # as the HTTP server binds: a port whose last connections wait to close is free
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as e:
            raise DynShapeError(
                f"--port {port}: 127.0.0.1:{port} cannot be bound ({e.strerror}); another "
                f"server may have it: give another port, or --port 0 for any free one"
            ) from None


#: Tries of ``--port 0`` (any free port): a port found free may be taken before Serve's proxy
#: binds it (Ray's own processes bind ports as they start), so another is tried.
FREE_PORT_TRIES = 3


def _start_http(
    start: Callable[..., Any], stop: Callable[[], None], wanted: int, progress: Any
) -> int:
    """Start Serve's HTTP proxy on 127.0.0.1 (``start`` is ``serve.start``, ``stop``
    ``serve.shutdown``) at port ``wanted``, or at a free port when it is 0, tried again at
    another when that one was taken meanwhile; returns the port. A port that cannot be bound
    is a DynShapeError, not Ray's traceback."""
    for _ in range(1 if wanted else FREE_PORT_TRIES):
        port = wanted or _free_port()
        progress.step(f"starting Serve, HTTP on 127.0.0.1:{port}")
        try:
            start(http_options={"host": "127.0.0.1", "port": port})
            return port
        except Exception as e:  # Ray's RayTaskError wraps the proxy's RuntimeError
            if "Failed to bind to address" not in str(e):
                raise
            stop()  # the controller and the failed proxy go; the next try starts afresh
    raise DynShapeError(
        f"Serve's HTTP proxy could not bind 127.0.0.1:{port}: "
        + (
            "another server has it: give another --port"
            if wanted
            else f"tried {FREE_PORT_TRIES} free ports"
        )
    )
