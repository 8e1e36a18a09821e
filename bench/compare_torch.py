#!/usr/bin/env python3
"""burnc against PyTorch on one GPU, in one run.

Runs burnc-bench on a CUDA device (its JSON report), then times the same workloads, at the same
sizes, in PyTorch eager and torch.compile on the same GPU, and prints burnc / PyTorch ratios of
effective bandwidth (bytes each job must move: inputs read once, outputs written once) and of
latency. Everything is measured in this run: these machines are shared and noisy.

    bench/compare_torch.py --bench BUILD/bench/burnc-bench [--device cuda:0] [--reps N]
                           [--json OUT.json] [--skip-compile-time] [NAME...]

PyTorch timing: CUDA events around each run after a warm-up, medians of --reps, inputs drawn
fresh from a normal distribution (never zeros). The chains are written op by op as burnc-bench
writes them (bench/workloads.c), so torch.compile gets the same fusion opportunity.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

# Sizes burnc-bench uses on a GPU device (bench/workloads.c, choose_sizes).
GELU_N = 1 << 28
SUM_N = 1 << 28
ROWS, COLS = 16384, 8192
SMALL_N = 4096
SQRT2 = math.sqrt(2.0)


def gelu_chain(x, w, b, torch):
    return x * (torch.erf(x / SQRT2) + 1) / 2 * w + b


def softmax_chain(x, torch):
    m = torch.amax(x, dim=1, keepdim=True)
    e = torch.exp(x - m)
    return e / torch.sum(e, dim=1, keepdim=True)


def layer_norm_chain(x, torch):
    c = x - torch.mean(x, dim=1, keepdim=True)
    var = torch.mean(c * c, dim=1, keepdim=True)
    return c / torch.sqrt(var + 1e-5)


def bcast_chain(x, a, b, c, d, torch):
    t = x * a
    t = t + c
    t = t - b
    t = t * d
    t = torch.maximum(t, a)
    t = t + x
    t = t * 0.5
    t = t - c
    t = torch.abs(t)
    return t + b


def sum_chain(x, torch):
    return torch.sum(x)


def small_chain(x, w, b):
    for _ in range(10):
        x = x * w + b
    return x


def event_median_ms(fn, reps, torch):
    """Median device time of fn() in ms (CUDA events), after two warm-up runs."""
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def host_median_us(fn, iters, torch):
    """Median host time per call in us, each call synchronized (as burnc-bench's small_ops)."""
    for _ in range(50):
        fn()
        torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def run_burnc(args):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "burnc.json")
        cmd = [args.bench, "--device", args.device, "--reps", str(args.reps), "--json", out] + args.names
        print("running:", " ".join(cmd), flush=True)
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        print(proc.stdout)
        if not os.path.exists(out):
            sys.exit("compare_torch: burnc-bench wrote no report (exit %d)" % proc.returncode)
        with open(out) as f:
            report = json.load(f)
    return {w["name"]: {m["name"]: m["value"] for m in w["metrics"]} for w in report["workloads"]}


def measure_torch(args, wanted):
    import torch

    dev = torch.device("cuda")
    torch.manual_seed(int(time.time()))
    results = {}

    def randn(*shape):
        return torch.randn(*shape, device=dev, dtype=torch.float32)

    def both(name, fn, inputs, nbytes):
        eager = event_median_ms(lambda: fn(*inputs), args.reps, torch)
        compiled_fn = torch.compile(fn)
        compiled = event_median_ms(lambda: compiled_fn(*inputs), args.reps, torch)
        results[name] = {"eager_ms": eager, "compile_ms": compiled,
                         "eager_gbps": nbytes / (eager * 1e6), "compile_gbps": nbytes / (compiled * 1e6)}
        print("  torch %-10s eager %8.3f ms (%6.0f GB/s)  compiled %8.3f ms (%6.0f GB/s)"
              % (name, eager, results[name]["eager_gbps"], compiled, results[name]["compile_gbps"]), flush=True)

    print("PyTorch %s on %s" % (torch.__version__, torch.cuda.get_device_name(0)), flush=True)
    if "gelu" in wanted:
        x, w, b = randn(GELU_N), randn(GELU_N), randn(GELU_N)
        both("gelu", lambda x, w, b: gelu_chain(x, w, b, torch), (x, w, b), 4 * GELU_N * 4)
        del x, w, b
    if "softmax" in wanted:
        x = randn(ROWS, COLS)
        both("softmax", lambda x: softmax_chain(x, torch), (x,), 2 * ROWS * COLS * 4)
        del x
    if "layer_norm" in wanted:
        x = randn(ROWS, COLS)
        both("layer_norm", lambda x: layer_norm_chain(x, torch), (x,), 2 * ROWS * COLS * 4)
        del x
    if "sum" in wanted:
        x = randn(SUM_N)
        both("sum", lambda x: sum_chain(x, torch), (x,), SUM_N * 4 + 4)
        del x
    if "bcast" in wanted:
        x, a, b = randn(ROWS, COLS), torch.rand(COLS, device=dev), randn(COLS)
        c, d = randn(ROWS, 1), torch.rand(ROWS, 1, device=dev)
        nbytes = (2 * ROWS * COLS + 2 * COLS + 2 * ROWS) * 4
        both("bcast", lambda x, a, b, c, d: bcast_chain(x, a, b, c, d, torch), (x, a, b, c, d), nbytes)
        del x, a, b, c, d
    if "small_ops" in wanted:
        x, w, b = randn(SMALL_N), randn(SMALL_N), randn(SMALL_N)
        compiled = torch.compile(small_chain)
        results["small_ops"] = {
            "eager_us": host_median_us(lambda: small_chain(x, w, b), 1000, torch),
            "compile_us": host_median_us(lambda: compiled(x, w, b), 1000, torch),
            "empty_sync_us": host_median_us(lambda: None, 1000, torch),
        }
        print("  torch small_ops eager %.1f us, compiled %.1f us, empty sync %.1f us per iteration"
              % (results["small_ops"]["eager_us"], results["small_ops"]["compile_us"],
                 results["small_ops"]["empty_sync_us"]), flush=True)
    if "first_call" in wanted and not args.skip_compile_time:
        torch._dynamo.reset()
        x, w, b = randn(1 << 20), randn(1 << 20), randn(1 << 20)
        fn = torch.compile(lambda x, w, b: gelu_chain(x, w, b, torch))
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn(x, w, b)
        torch.cuda.synchronize()
        results["first_call"] = {"compile_first_ms": (time.perf_counter() - t0) * 1e3}
        print("  torch first call of the compiled gelu chain: %.0f ms" % results["first_call"]["compile_first_ms"],
              flush=True)
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", required=True, help="the burnc-bench executable")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--reps", type=int, default=11)
    ap.add_argument("--json", help="write both sides' figures here")
    ap.add_argument("--skip-compile-time", action="store_true", help="do not time torch.compile's first call")
    ap.add_argument("names", nargs="*", help="workloads (default: all that PyTorch can run)")
    args = ap.parse_args()
    known = ["gelu", "softmax", "layer_norm", "sum", "bcast", "small_ops", "first_call"]
    args.names = args.names or known
    wanted = [n for n in known if n in args.names]

    burnc = run_burnc(args)
    torch_res = measure_torch(args, wanted)

    print("\nburnc / PyTorch, same run (bandwidth ratios: > 1 means burnc is faster):")
    print("%-11s %12s %12s %12s %12s %12s" % ("workload", "burnc GB/s", "eager GB/s", "compile GB/s",
                                             "vs eager", "vs compile"))
    for name in ["gelu", "softmax", "layer_norm", "sum", "bcast"]:
        if name not in burnc or name not in torch_res:
            continue
        g, t = burnc[name]["fused_gbps"], torch_res[name]
        print("%-11s %12.0f %12.0f %12.0f %11.2fx %11.2fx" % (name, g, t["eager_gbps"], t["compile_gbps"],
                                                            g / t["eager_gbps"], g / t["compile_gbps"]))
    if "small_ops" in burnc and "small_ops" in torch_res:
        b, t = burnc["small_ops"], torch_res["small_ops"]
        print("small_ops   burnc %.1f us per iteration (empty sync %.1f us); PyTorch eager %.1f us (%.2fx), "
              "torch.compile %.1f us (%.2fx), empty sync %.1f us"
              % (b["fused_us_per_iter"], b["empty_sync_us"], t["eager_us"], t["eager_us"] / b["fused_us_per_iter"],
                 t["compile_us"], t["compile_us"] / b["fused_us_per_iter"], t["empty_sync_us"]))
    if "first_call" in burnc and "first_call" in torch_res:
        b, t = burnc["first_call"]["first_call_ms"], torch_res["first_call"]["compile_first_ms"]
        print("first_call  burnc %.1f ms, torch.compile %.0f ms (%.0fx)" % (b, t, t / b))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"burnc": burnc, "torch": torch_res}, f, indent=1)


if __name__ == "__main__":
    main()
