"""`egc`: run, optimize, report and benchmark Frontend-IR programs from the command line.

    egc run FILE.json [--target llvm|cuda|reference] [--inputs random|FILE.npz] [--seed N] [--check]
    egc optimize FILE.json [--target ...] [--dump=frontend,uops,egraph,kernels,source]
    egc report FILE.json -o report.html [--json report.json]
    egc bench [args...]

Exit codes: 0 success; 1 `--check` found a mismatch; 2 a diagnostic (bad input, bad arguments, missing
toolchain); 3 an internal error (a bug: rerun with --traceback and report it); 130 interrupted.
Diagnostics go to stderr in seed 001 §14 form (code, kind, at, why, suggestion); never a traceback unless
--traceback is given.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import subprocess
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from egraph_compiler import __version__
from egraph_compiler.egraph.report import IterationStats
from egraph_compiler.frontend.frontend_ir import FrontendGraph, describe, load_frontend_ir
from egraph_compiler.frontend.onnx.importer import from_onnx
from egraph_compiler.ir.diagnostics import CompilerError, InvalidArgument, MalformedJSON, MissingInput
from egraph_compiler.ir.interpret import evaluate
from egraph_compiler.ir.uop import pretty
from egraph_compiler.kernel import disk_cache
from egraph_compiler.report.html import render_html
from egraph_compiler.rules import catalog

TARGETS = ("llvm", "cuda", "reference")
DUMP_STAGES = ("frontend", "uops", "egraph", "kernels", "source")
NEEDS_OPTIMIZE = {"egraph", "kernels", "source"}
RTOL = ATOL = 1e-3  # seed 001 §13


# ---- progress --------------------------------------------------------------------------------------------------------


class Progress:
    """One status line on stderr per saturation step and per later phase (extraction, fusion trials, tuning,
    decoding): rewritten in place on a TTY, one line each otherwise."""

    def __init__(self, stream: TextIO, tty: bool) -> None:
        self.stream, self.tty = stream, tty
        self.start = time.perf_counter()
        self.width = 0
        self.active = False

    def __call__(self, st: IterationStats | str) -> None:
        elapsed = f"{time.perf_counter() - self.start:.1f}s elapsed"
        if isinstance(st, str):  # a later phase: extraction, a fusion trial, tuning, decoding
            line = f"[egc] {st}, {elapsed}"
        else:
            classes = "" if st.classes is None else f", {st.classes} classes"
            fired = sum(st.matches.values())
            line = f"[egc] saturating: iteration {st.index} ({st.stage}), {st.nodes} nodes{classes}, {fired} matches, {elapsed}"
        if self.tty:
            self.stream.write("\r" + line.ljust(self.width))
            self.width = max(self.width, len(line))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
        self.active = True

    def close(self) -> None:
        if self.tty and self.active:
            self.stream.write("\n")
            self.stream.flush()
        self.active = False


# ---- helpers ---------------------------------------------------------------------------------------------------------


def _limits(args: argparse.Namespace) -> dict[str, Any]:
    return {"node_limit": args.node_limit, "iter_limit": args.iter_limit, "time_limit": args.time_limit}


def _optimize_fn() -> Callable[..., Any]:
    mod = importlib.import_module("egraph_compiler.optimize")
    return mod.optimize


def _progress(args: argparse.Namespace) -> Progress | None:
    if args.no_progress:
        return None
    tty = sys.stderr.isatty()
    return Progress(sys.stderr, tty) if (args.progress or tty) else None


def _compile(graph: Any, args: argparse.Namespace, inputs: Any = None) -> Any:
    """optimize() under the command's target and limits, with the progress line if wanted."""
    prog_line = _progress(args)
    try:
        program = _optimize_fn()(
            graph,
            args.target,
            progress=prog_line,
            tune=args.tune,
            nolocals=args.nolocals,
            cpu=args.cpu,
            inputs=inputs,
            provenance=args.provenance,
            memory_limit=args.memory_limit,
            **_limits(args),
        )
    finally:
        if prog_line is not None:
            prog_line.close()
    report = getattr(program, "report", None)
    # said when a limit made the program worse (the report's `degraded`), or when a limit the user set stopped the
    # search: not for the stages' own node budgets under default limits, which bound every search by design
    asked = any(v is not None for v in _limits(args).values())
    if report is not None and (report.degraded or (asked and report.limit_hit)):
        why = "; ".join(report.degraded) or f"saturation stopped at its {report.stop_reason.replace('_', ' ')}"
        print(
            f"W2001 LimitReached: {why}; the program is the best found so far\n"
            "  suggestion: raise --node-limit / --iter-limit / --time-limit (and optimize's search_time) for a better one",
            file=sys.stderr,
        )
    return program


def _read_npz(spec: str) -> dict[str, np.ndarray]:
    """Every array of an .npz inputs file (no pickled objects)."""
    try:
        with np.load(Path(spec), allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}
    except FileNotFoundError:
        raise MalformedJSON(
            at=spec, why="inputs file not found", suggestion="pass --inputs random or an existing .npz file"
        ) from None
    except Exception as e:  # not an npz, pickled objects, truncated zip, ...
        raise InvalidArgument(
            at=spec,
            why=f"cannot read the inputs file: {type(e).__name__}: {e}",
            suggestion="save the inputs with numpy.savez(path, A=..., B=...)",
        ) from None


def _load_inputs(spec: str, graph: FrontendGraph, seed: int) -> dict[str, np.ndarray]:
    """Random inputs, or arrays from an .npz keyed by placeholder or tensor name."""
    if spec == "random":
        return graph.random_inputs(seed)
    arrays = _read_npz(spec)
    held = sorted(arrays)
    out: dict[str, np.ndarray] = {}
    for tname, t in graph.inputs.items():
        ph = t.uop.arg[0]
        if ph in arrays:
            out[ph] = arrays.pop(ph)
        elif tname in arrays:
            out[ph] = arrays.pop(tname)
        else:
            raise MissingInput(
                at=f"input {tname!r}",
                why=f"{spec} has no array named {tname!r}",
                suggestion=f"add {tname}=<array of shape {t.shape}> to the .npz (it holds {held})",
            )
    if arrays:
        raise MissingInput(
            at=f"input {sorted(arrays)[0]!r}",
            why=f"{spec} has arrays the graph does not take: {sorted(arrays)}",
            suggestion=f"the graph's inputs are {list(graph.inputs)}",
        )
    return out


def _stats(name: str, a: np.ndarray) -> str:
    line = f"{name}: shape {tuple(a.shape)} dtype {a.dtype}"
    if a.size:
        f = a.astype(np.float64)
        with warnings.catch_warnings():  # all-NaN outputs: print nan, no warning
            warnings.simplefilter("ignore", RuntimeWarning)
            line += f" min {np.nanmin(f):.6g} max {np.nanmax(f):.6g} mean {np.nanmean(f):.6g}"
        bad = int(np.count_nonzero(~np.isfinite(f)))
        if bad:
            line += f" ({bad} non-finite)"
    return line


def compare(got: np.ndarray, want: np.ndarray, rtol: float = RTOL, atol: float = ATOL) -> tuple[bool, float, float, str]:
    """(ok, max abs error, max relative error, note) under |got-want| <= atol + rtol*|want|, NaN == NaN."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return False, float("inf"), float("inf"), f"shape {got.shape} != reference {want.shape}"
    g, w = got.astype(np.float64), want.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        diff = np.abs(g - w)
        diff = np.where(np.isnan(g) & np.isnan(w), 0.0, diff)  # NaN == NaN
        diff = np.where(np.isinf(g) & np.isinf(w) & (np.sign(g) == np.sign(w)), 0.0, diff)  # same infinity
        diff = np.where(np.isnan(diff), np.inf, diff)
        rel = np.where(diff == 0, 0.0, diff / np.abs(w))
    abs_err = float(diff.max()) if diff.size else 0.0
    rel_err = float(rel.max()) if rel.size else 0.0
    ok = bool(np.all(diff <= atol + rtol * np.abs(np.where(np.isfinite(w), w, 0.0))))
    return ok, abs_err, rel_err, ""


def _as_tuple(x: Any) -> tuple[np.ndarray, ...]:
    return tuple(np.asarray(a) for a in x) if isinstance(x, (tuple, list)) else (np.asarray(x),)


def _header(stage: str) -> str:
    return f"==== {stage} " + "=" * max(0, 72 - len(stage))


def _parse_dump(spec: str | None) -> list[str]:
    if not spec:
        return []
    stages = [s.strip() for s in spec.split(",") if s.strip()]
    if "all" in stages:
        return list(DUMP_STAGES)
    bad = [s for s in stages if s not in DUMP_STAGES]
    if bad:
        raise InvalidArgument(
            at=f"--dump={spec}", why=f"unknown stage(s) {bad}", suggestion=f"choose from {','.join(DUMP_STAGES)} (or all)"
        )
    return list(dict.fromkeys(stages))


# ---- printing stages -------------------------------------------------------------------------------------------------


def uops_text(graph: FrontendGraph, max_lines: int = 400) -> str:
    return "\n".join(f"output {name}:\n{pretty(t.uop, max_lines=max_lines)}" for name, t in graph.outputs.items())


def egraph_text(report: Any) -> str:
    lines = [report.format(iterations=None)]
    snap = report.extra.get("egraph_snapshot")
    if snap:
        lines.append(
            f"e-graph snapshot: {snap.get('classes_drawn')} of {snap.get('classes_total')} e-classes drawn "
            "(egc report renders it)"
        )
    return "\n".join(lines)


def kernels_text(program: Any) -> str:
    report = getattr(program, "report", None)
    extra = {k.get("name"): k for k in (report.extra.get("kernels", []) if report is not None else []) if isinstance(k, dict)}
    out = [program.describe() if hasattr(program, "describe") else ""]
    for k in program.kernels:
        out.append(f"-- kernel {k.name}: reads {list(k.reads)} writes {list(k.writes)}")
        cost = k.cost or extra.get(k.name, {}).get("cost") or {}
        if cost:
            out.append("   cost: " + ", ".join(f"{n}={v:.4g}" if isinstance(v, float) else f"{n}={v}" for n, v in cost.items()))
        for alt in extra.get(k.name, {}).get("alternatives", []) or []:
            seconds = (alt.get("cost") or {}).get("seconds")
            est = f"{seconds * 1e6:.1f} us estimated" if isinstance(seconds, float) else "no estimate"
            differs = f": {alt['differs']}" if alt.get("differs") else ""
            out.append(f"   rejected: {alt.get('description', '?')} ({est}{differs})")
        out.append(pretty(k.ast, max_lines=200))
    return "\n".join(out)


# ---- commands --------------------------------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    graph = load_frontend_ir(args.file)
    inputs = _load_inputs(args.inputs, graph, args.seed)  # before optimizing: a bad .npz fails fast
    program = _compile(graph, args)
    t0 = time.perf_counter()
    outs = _as_tuple(program(**inputs))  # compiles first: the progress line, if any, says so
    dt = time.perf_counter() - t0
    if isinstance(line := getattr(program, "progress", None), Progress):
        line.close()
    names = list(graph.outputs)
    print(
        f"ran {args.file} on {args.target}: {len(program.kernels)} kernel(s), {dt * 1e3:.2f} ms (first run, "
        "includes compilation)"
    )
    for name, a in zip(names, outs):
        print(_stats(name, a))
    if not args.check:
        return 0
    refs = _as_tuple(evaluate([t.uop for t in graph.outputs.values()], inputs))
    all_ok = len(refs) == len(outs)
    for name, got, want in zip(names, outs, refs):
        ok, abs_err, rel_err, note = compare(got, want, args.rtol, args.atol)
        all_ok &= ok
        print(
            f"check {name}: {'ok' if ok else 'MISMATCH'}: max abs err {abs_err:.3g}, max rel err {rel_err:.3g} "
            f"(rtol={args.rtol:g}, atol={args.atol:g}){'; ' + note if note else ''}"
        )
    if len(refs) != len(outs):
        print(f"check: the program returned {len(outs)} outputs, the reference {len(refs)}")
    print("check: PASS" if all_ok else "check: FAIL")
    return 0 if all_ok else 1


def cmd_optimize(args: argparse.Namespace) -> int:
    stages = _parse_dump(args.dump)
    graph = load_frontend_ir(args.file)
    program = _compile(graph, args) if (NEEDS_OPTIMIZE & set(stages) or not stages) else None
    if not stages:
        assert program is not None  # compiled: no stages asks for the program's summary
        print(program.summary() if hasattr(program, "summary") else program)
        if getattr(program, "report", None) is not None:
            print(str(program.report).splitlines()[0])
        return 0
    for stage in stages:
        print(_header(stage))
        if stage == "frontend":
            print(describe(graph))
        elif stage == "uops":
            print(uops_text(graph))
        elif stage == "egraph":
            assert program is not None  # compiled: the stage is in NEEDS_OPTIMIZE
            print(egraph_text(program.report))
        elif stage == "kernels":
            print(kernels_text(program))
        elif stage == "source":
            assert program is not None  # compiled: the stage is in NEEDS_OPTIMIZE
            print(program.source)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    graph = load_frontend_ir(args.file)
    program = _compile(graph, args)
    report = program.report
    text = describe(graph) + "\n\n" + uops_text(graph, max_lines=120)
    page = render_html(
        report,
        title=args.title or f"egc report: {Path(args.file).name} ({args.target})",
        input_graph_text=text,
        program=program,
    )
    _write(args.output, page)
    print(f"wrote {args.output}")
    if args.json:
        _write(args.json, report.to_json())
        print(f"wrote {args.json}")
    return 0


def cmd_onnx(args: argparse.Namespace) -> int:
    model = from_onnx(args.file)
    if args.inputs == "random":
        rng = np.random.default_rng(args.seed)
        inputs = {n: _random_like(t, rng) for n, t in model.inputs.items()}
    else:
        inputs = _load_npz(args.inputs, {n: t.shape for n, t in model.inputs.items()})
    program = _compile(model.outputs, args, inputs=model.inputs)
    t0 = time.perf_counter()
    outs = _as_tuple(program(**inputs))
    dt = time.perf_counter() - t0
    print(f"ran {args.file} on {args.target}: {len(program.kernels)} kernel(s), {dt * 1e3:.2f} ms (first run)")
    for name, a in zip(model.output_names, outs):
        print(_stats(name, np.asarray(a)))
    if args.report:
        title = f"egc onnx report: {Path(args.file).name} ({args.target})"
        _write(args.report, render_html(program.report, title=title, input_graph_text="", program=program))
        print(f"wrote {args.report}")
    return 0


def _random_like(t: Any, rng: np.random.Generator) -> np.ndarray:
    dt = np.dtype(t.dtype.np) if t.dtype.name != "bfloat16" else np.dtype(np.float32)
    if dt.kind == "f":
        return rng.standard_normal(t.shape).astype(dt)
    if dt.kind == "b":
        return rng.random(t.shape) < 0.5
    return rng.integers(0, 8, t.shape).astype(dt)


def _load_npz(spec: str, shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """Arrays from an .npz, one per input name (checked against the program when it runs)."""
    arrays = _read_npz(spec)
    missing = [n for n in shapes if n not in arrays]
    if missing:
        raise MissingInput(
            at=f"input {missing[0]!r}",
            why=f"{spec} has no array named {missing[0]!r}",
            suggestion=f"add {missing[0]}=<array of shape {shapes[missing[0]]}> (it holds {sorted(arrays)})",
        )
    return {n: arrays[n] for n in shapes}


def _write(path: str, text: str) -> None:
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as e:
        raise InvalidArgument(
            at=path, why=f"cannot write the file: {e.strerror or e}", suggestion="choose a writable path"
        ) from None


def find_bench() -> Path | None:
    """bench/run.py of a source checkout: next to the package, or under the current directory."""
    for base in (Path(__file__).resolve().parent.parent, Path.cwd()):
        p = base / "bench" / "run.py"
        if p.is_file():
            return p
    return None


def cmd_rules(args: argparse.Namespace) -> int:
    known = sorted({r.category for r in catalog.rules()})
    if args.category is not None and args.category not in known:
        raise InvalidArgument(
            at="--category", why=f"no rule has category {args.category!r}", suggestion=f"use one of {', '.join(known)}"
        )
    sys.stdout.write(catalog.table(args.markdown, args.category))
    return 0


def cmd_cache(args: argparse.Namespace) -> int:
    if args.action == "clear":
        print(f"removed {disk_cache.clear()} entries from {disk_cache.directory()}")
        return 0
    i = disk_cache.info()
    print(f"directory: {i['directory']}{'' if i['enabled'] else ' (off: EGC_DISK_CACHE=0)'}")
    print(f"programs: {i['entries']['programs']}, kernel objects: {i['entries']['objects']}")
    print(f"size: {i['bytes'] / 2**20:.1f} MiB of {i['limit_bytes'] / 2**20:.0f} MiB")
    if i["oldest"]:
        print(f"least recently used entry: {i['oldest']}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from egraph_compiler import demo

    return demo.main([*([args.file] if args.file else []), "--target", args.target])


def cmd_bench(args: argparse.Namespace) -> int:
    script = find_bench()
    if script is None:
        raise InvalidArgument(
            at="egc bench",
            why="bench/run.py was not found (it ships with a source checkout, not with the installed package)",
            suggestion="run egc bench from a git checkout of egraph-compiler, or run `python bench/run.py` there",
        )
    rest = list(args.bench_args)
    if rest[:1] == ["--"]:
        rest = rest[1:]
    return subprocess.run([sys.executable, str(script), *rest], check=False).returncode


# ---- argument parsing ------------------------------------------------------------------------------------------------


def _parsed(convert: Callable[[str], Any], ok: Callable[[Any], bool], what: str) -> Callable[[str], Any]:
    """An argparse type: `convert` the text, then require `ok` of the value (`what` it must be, for the message)."""

    def parse(s: str) -> Any:
        try:
            v = convert(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{s!r} is not {'an integer' if convert is int else 'a number'}") from None
        if not ok(v):
            raise argparse.ArgumentTypeError(f"{s!r} is not {what}")
        return v

    return parse


_positive_int = _parsed(int, lambda v: v > 0, "a positive integer")
_bytes = _parsed(int, lambda v: v >= 0, "a count of bytes (a non-negative integer)")
_positive_float = _parsed(float, lambda v: v > 0, "a positive number")
_seed = _parsed(int, lambda v: v >= 0, "a seed (a non-negative integer)")
_tolerance = _parsed(float, lambda v: 0 <= v < float("inf"), "a finite tolerance >= 0")


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--traceback", action="store_true", help="show Python tracebacks of internal errors")
    compile_opts = argparse.ArgumentParser(add_help=False)
    compile_opts.add_argument("file", metavar="FILE.json", help="Frontend-IR JSON file (seed 001 §2.2)")
    compile_opts.add_argument("--target", choices=TARGETS, default="llvm", help="backend (default: llvm)")
    g = compile_opts.add_argument_group("limits (default: the optimizer's)")
    g.add_argument("--node-limit", type=_positive_int, metavar="N", help="stop saturating past N e-nodes")
    g.add_argument("--iter-limit", type=_positive_int, metavar="N", help="at most N saturation steps per stage")
    g.add_argument(
        "--time-limit",
        type=_positive_float,
        metavar="SECONDS",
        help="seconds for the whole optimize call (saturation, fusion search, ranking)",
    )
    compile_opts.add_argument(
        "--tune",
        action="store_true",
        help="time the best few schedules of each kernel on this machine and keep the fastest (cached on disk)",
    )
    compile_opts.add_argument(
        "--cpu",
        metavar="NAME",
        help="llvm target: the x86 CPU to generate code for, an LLVM CPU name such as haswell "
        "(AVX2) or skylake-avx512 (default: $EGC_CPU, else this host)",
    )
    compile_opts.add_argument(
        "--nolocals",
        action="store_true",
        help="the Nolocals OptOp: no schedule with workgroup dims (LOCAL, GROUP_REDUCE threads, tensor cores)",
    )
    compile_opts.add_argument(
        "--memory-limit",
        type=_bytes,
        metavar="BYTES",
        help="bytes the intermediates' arena may take: buffers are fused (at a cost in time) until it fits",
    )
    compile_opts.add_argument(
        "--provenance",
        action="store_true",
        help="record which rule built each e-node: the report lists the chosen program's e-nodes per rule, "
        "with a picture of each top rule's (slower; no compile cache)",
    )
    pg = compile_opts.add_mutually_exclusive_group()
    pg.add_argument("--progress", action="store_true", help="print progress to stderr (default: on a TTY)")
    pg.add_argument("--no-progress", action="store_true", help="never print progress")

    p = argparse.ArgumentParser(
        prog="egc",
        description="egraph-compiler: equality-saturation compiler for tinygrad-style UOp graphs.",
        epilog="Exit codes: 0 ok, 1 check mismatch, 2 diagnostic, 3 internal error.",
    )
    p.add_argument("--version", action="version", version=f"egc {_version()}")
    p.add_argument("--traceback", dest="traceback_top", action="store_true", help="show Python tracebacks of errors")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    r = sub.add_parser(
        "run",
        parents=[common, compile_opts],
        help="optimize, run and optionally check a graph",
        description="Optimize a Frontend-IR graph, run it and print each output's statistics.",
    )
    r.add_argument(
        "--inputs",
        default="random",
        metavar="random|FILE.npz",
        help="input arrays: random (default) or an .npz keyed by input tensor name",
    )
    r.add_argument("--seed", type=_seed, default=0, help="seed for random inputs (default 0)")
    r.add_argument("--check", action="store_true", help="compare with the reference interpreter; exit 1 on mismatch")
    r.add_argument("--rtol", type=_tolerance, default=RTOL, help=f"relative tolerance of --check (default {RTOL:g})")
    r.add_argument("--atol", type=_tolerance, default=ATOL, help=f"absolute tolerance of --check (default {ATOL:g})")
    r.set_defaults(func=cmd_run)

    o = sub.add_parser(
        "optimize",
        parents=[common, compile_opts],
        help="optimize a graph and dump stages",
        description="Optimize a Frontend-IR graph and print the requested stages.",
    )
    o.add_argument("--dump", metavar="STAGES", help=f"comma-separated: {','.join(DUMP_STAGES)} (or all)")
    o.set_defaults(func=cmd_optimize)

    rp = sub.add_parser(
        "report",
        parents=[common, compile_opts],
        help="write the HTML (and JSON) report",
        description="Optimize a graph and write a self-contained HTML report.",
    )
    rp.add_argument("-o", "--output", required=True, metavar="report.html", help="HTML file to write")
    rp.add_argument("--json", metavar="report.json", help="also write Report.to_json() here")
    rp.add_argument("--title", help="page title")
    rp.set_defaults(func=cmd_report)

    rl = sub.add_parser(
        "rules",
        help="list every rewrite rule with its category, check and description",
        description="List the rules the compiler runs: rule set, name, category, how it is checked, what it does.",
    )
    rl.add_argument("--markdown", action="store_true", help="a Markdown table (docs/RULES.md is this output)")
    rl.add_argument("--category", metavar="NAME", help="only the rules of this category")
    rl.set_defaults(func=cmd_rules)

    ox = sub.add_parser(
        "onnx",
        parents=[common],
        help="import an ONNX model, optimize, run it and print each output's statistics",
        description="Import an .onnx file (from_onnx), optimize it, run it on .npz or random inputs, and "
        "optionally write the HTML report. Needs the onnx package (pip install egraph-compiler[onnx]).",
    )
    ox.add_argument("file", metavar="MODEL.onnx")
    ox.add_argument("--inputs", default="random", metavar="random|FILE.npz", help="arrays by graph input name")
    ox.add_argument("--seed", type=_seed, default=0, help="seed for random inputs (default 0)")
    ox.add_argument("--target", choices=TARGETS, default="llvm", help="backend (default: llvm)")
    ox.add_argument("--report", metavar="report.html", help="also write the HTML report here")
    ox.set_defaults(
        func=cmd_onnx,
        tune=False,
        nolocals=False,
        cpu=None,
        node_limit=None,
        iter_limit=None,
        time_limit=None,
        provenance=False,
        memory_limit=None,
    )
    ox.set_defaults(progress=False, no_progress=False)

    ca = sub.add_parser(
        "cache",
        help="show or empty the on-disk compile cache",
        description="The on-disk compile cache (optimized programs and their kernels' machine code): `info` shows "
        "where it is, what it holds and its limit (EGC_CACHE_DIR, EGC_CACHE_SIZE, EGC_DISK_CACHE=0 turns it off); "
        "`clear` deletes every entry.",
    )
    ca.add_argument("action", choices=("info", "clear"))
    ca.set_defaults(func=cmd_cache)

    d = sub.add_parser(
        "demo",
        help="the main job on a shipped example: optimize, run and check against numpy",
        description="Load the GEMM+bias+ReLU Frontend-IR example shipped with the package (or FILE), optimize it, "
        "run it and check it against numpy: `python -m egraph_compiler.demo` does the same.",
    )
    d.add_argument("file", nargs="?", help="a Frontend-IR file (default: the shipped gemm_bias_relu.json)")
    d.add_argument("--target", default="llvm", help="llvm, reference or cuda")
    d.set_defaults(func=cmd_demo)

    b = sub.add_parser(
        "bench",
        help="run the benchmarks (bench/run.py)",
        description="Run bench/run.py from a source checkout, passing every argument after `bench` "
        "on to it (`egc bench -- --help` shows its own help).",
    )
    b.add_argument("bench_args", nargs=argparse.REMAINDER, help="arguments for bench/run.py")
    b.set_defaults(func=cmd_bench)
    return p


def _version() -> str:
    return __version__


def internal_error(e: BaseException, command: str) -> str:
    msg = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
    return (
        f"E9000 InternalError: {type(e).__name__}{': ' + msg if msg else ''}\n"
        f"  at: egc {command}\n"
        "  suggestion: this is a bug in egraph-compiler, not in your input; rerun with --traceback and report it"
    )


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    show_tb = "--traceback" in argv
    command = next((a for a in argv if not a.startswith("-")), "")
    try:
        parser = build_parser()
        if command == "bench" and argv[argv.index("bench") + 1 :] not in (["-h"], ["--help"]):
            # everything after `bench` belongs to bench/run.py (argparse's REMAINDER mangles leading options)
            cut = argv.index("bench") + 1
            args = parser.parse_args(argv[:cut])
            args.bench_args = argv[cut:]
        else:
            args = parser.parse_args(argv)
        return int(args.func(args))
    except SystemExit as e:  # argparse: --help (0) or a usage error (2)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    except CompilerError as e:
        print(e.format(), file=sys.stderr)
        if show_tb:
            traceback.print_exc()
        return 2
    except KeyboardInterrupt:
        print("egc: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `egc ... | head`: silence the flush at exit
        with contextlib.suppress(OSError, ValueError, AttributeError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as e:
        if show_tb:
            traceback.print_exc()
        print(internal_error(e, command), file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
