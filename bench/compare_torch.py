#!/usr/bin/env python3
"""burnc against PyTorch on one GPU, in one run.

Runs burnc-bench on a CUDA device (its JSON report), then times the same workloads, at the same
sizes, in PyTorch eager and torch.compile on the same GPU, and prints burnc / PyTorch ratios of
effective bandwidth (bytes each job must move: inputs read once, outputs written once) and of
latency. Everything is measured in this run: these machines are shared and noisy.

    bench/compare_torch.py --bench BUILD/bench/burnc-bench [--device cuda:0] [--reps N]
                           [--json OUT.json] [--skip-compile-time] [NAME...]

NAME: workloads or groups. Default: the memory-bound and latency workloads (gelu softmax
layer_norm sum bcast small_ops first_call); "matmul" means matmul_f32 matmul_tf32 matmul_bf16
matmul_f16 matmul_gelu, "train" means train_mlp train_deep, "all" everything. burnc-bench takes
the names as filters (a name selects every workload containing it: "gelu" runs matmul_gelu too).

PyTorch timing: CUDA events around each run after a warm-up, medians of --reps, inputs drawn
fresh from a normal distribution (never zeros). The chains are written op by op as burnc-bench
writes them (bench/workloads.c), so torch.compile gets the same fusion opportunity. Matmuls go
to cuBLAS through torch.matmul (f32 with allow_tf32 off, tf32 with it on, bf16 and f16 with
PyTorch's defaults); gelu(A@B + bias) also through torch.compile. Training steps mirror
bench/train.c's models and are timed like burnc-bench times them: host time of a whole step
ending in a synchronize, medians after warm-up steps, PyTorch eager and torch.compile (the
forward and loss compiled, and the optimizer step compiled on its own).
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

MEMORY = ["gelu", "softmax", "layer_norm", "sum", "bcast", "small_ops", "first_call"]
MATMUL = ["matmul_f32", "matmul_tf32", "matmul_bf16", "matmul_f16", "matmul_gelu"]
TRAIN = ["train_mlp", "train_deep"]
GROUPS = {"matmul": MATMUL, "train": TRAIN, "all": MEMORY + MATMUL + TRAIN}

# Matmuls (bench/matmul.c on a GPU): sizes, and per workload the dtype, TF32 and the target ratio
# of burnc's TFLOP/s to cuBLAS's.
MM_SIZES = (4096, 8192)
MM_KINDS = {"matmul_f32": ("float32", False, 0.8), "matmul_tf32": ("float32", True, 0.5),
            "matmul_bf16": ("bfloat16", False, 0.5), "matmul_f16": ("float16", False, 0.5)}
EPI_N = 4096                      # gelu(A@B + bias), f32 and bf16
EPI_TARGET = 1.0                  # burnc fused >= torch.compile
TRAIN_FLOOR = 1.0                 # burnc's fused step against PyTorch eager on the GPU (issue 9;
                                  # its fused / eager >= 1.3 is a cpu target, burnc-bench's)


def deep_sizes():
    """train_deep's (blocks, width, batch): bench/train.c's deep_sizes_get, same variable."""
    spec = os.environ.get("BURNC_BENCH_TRAIN_DEEP", "")
    try:
        b, w, n = (int(v) for v in spec.split("x"))
        if 1 <= b <= 64 and w >= 1 and n >= 1:
            return b, w, n
    except ValueError:
        pass
    return 8, 1024, 4096


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
    notes = {w["name"]: w.get("note", "") for w in report["workloads"]}
    return {w["name"]: {m["name"]: m["value"] for m in w["metrics"]} for w in report["workloads"]}, notes


def measure_matmul(args, wanted, torch, results):
    """cuBLAS through torch.matmul at burnc-bench's sizes and dtypes; gelu(A@B + bias) eager and
    compiled."""
    dev = torch.device("cuda")
    for name in [n for n in MATMUL if n in wanted and n in MM_KINDS]:
        dtype, tf32, _ = MM_KINDS[name]
        torch.backends.cuda.matmul.allow_tf32 = tf32
        results[name] = {}
        for n in MM_SIZES:
            a = torch.randn(n, n, device=dev).to(getattr(torch, dtype))
            b = torch.randn(n, n, device=dev).to(getattr(torch, dtype))
            ms = event_median_ms(lambda: torch.matmul(a, b), args.reps, torch)
            results[name][n] = {"ms": ms, "tflops": 2.0 * n ** 3 / (ms * 1e9)}
            print("  torch %-11s %d^3 %8.3f ms  %7.1f TFLOP/s" % (name, n, ms, results[name][n]["tflops"]),
                  flush=True)
            del a, b
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.cuda.empty_cache()
    if "matmul_gelu" in wanted:
        torch.backends.cuda.matmul.allow_tf32 = False
        results["matmul_gelu"] = {}

        def gelu_bias(a, b, bias):
            return torch.nn.functional.gelu(a @ b + bias)

        for dtype in ("float32", "bfloat16"):
            dt = getattr(torch, dtype)
            a, b = torch.randn(EPI_N, EPI_N, device=dev).to(dt), torch.randn(EPI_N, EPI_N, device=dev).to(dt)
            bias = torch.randn(EPI_N, device=dev).to(dt)
            eager = event_median_ms(lambda: gelu_bias(a, b, bias), args.reps, torch)
            compiled_fn = torch.compile(gelu_bias)
            compiled = event_median_ms(lambda: compiled_fn(a, b, bias), args.reps, torch)
            results["matmul_gelu"][dtype] = {"eager_ms": eager, "compile_ms": compiled}
            print("  torch matmul_gelu %s %d^3: eager %.3f ms, compiled %.3f ms" % (dtype, EPI_N, eager, compiled),
                  flush=True)
            del a, b, bias
        torch.cuda.empty_cache()


def train_model(name, torch, dev):
    """bench/train.c's model, batch, loss and Adam, with its initialisation."""
    nn = torch.nn
    if name == "train_mlp":
        widths, batch = [784, 1024, 1024, 10], 256
        layers = []
        for i in range(3):
            lin = nn.Linear(widths[i], widths[i + 1])
            nn.init.kaiming_uniform_(lin.weight, nonlinearity="relu")
            nn.init.zeros_(lin.bias)
            layers += [lin, nn.ReLU()] if i < 2 else [lin]
        x = torch.randn(batch, 784, device=dev)
        y = torch.randint(0, 10, (batch,), device=dev)
        loss_fn = nn.CrossEntropyLoss()
    else:
        blocks, width, batch = deep_sizes()
        layers = []
        for _ in range(blocks):
            lin = nn.Linear(width, width)
            nn.init.xavier_uniform_(lin.weight)
            nn.init.zeros_(lin.bias)
            layers += [nn.LayerNorm(width, eps=1e-5), nn.GELU(), lin]
        x, y = torch.randn(batch, width, device=dev), torch.randn(batch, width, device=dev)
        loss_fn = nn.MSELoss()
    model = nn.Sequential(*layers).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0)
    return model, opt, loss_fn, x, y


def train_steps(name, mode, reps, torch):
    """Median step time in ms of a fresh model (eager or compiled), and for eager the peak memory
    of one step in MB."""
    dev = torch.device("cuda")
    model, opt, loss_fn, x, y = train_model(name, torch, dev)

    def forward(x, y):
        return loss_fn(model(x), y)

    def opt_step():
        opt.step()

    if mode == "compile":  # the optimizer compiled on its own, as PyTorch's tutorial does it
        forward = torch.compile(forward)
        opt_step = torch.compile(opt_step, fullgraph=False)

    def step():
        opt.zero_grad(set_to_none=True)
        forward(x, y).backward()
        opt_step()

    for _ in range(4 if mode == "eager" else 8):  # compiling happens in the first ones
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    peak = 0.0
    if mode == "eager":
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() / 1e6
    return statistics.median(times), peak


def measure_train(args, wanted, torch, results):
    """One training step, eager and torch.compile, host time with a synchronize (as burnc-bench)."""
    torch.backends.cuda.matmul.allow_tf32 = False  # f32 like burnc's step
    for name in [n for n in TRAIN if n in wanted]:
        res = results[name] = {}
        res["eager_ms"], res["eager_peak_mb"] = train_steps(name, "eager", args.reps, torch)
        torch.cuda.empty_cache()
        res["compile_ms"], _ = train_steps(name, "compile", args.reps, torch)
        torch.cuda.empty_cache()
        print("  torch %-10s step eager %.3f ms, compiled %.3f ms; peak %.0f MB (a step, eager)"
              % (name, res["eager_ms"], res["compile_ms"], res["eager_peak_mb"]), flush=True)


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
    measure_matmul(args, wanted, torch, results)
    measure_train(args, wanted, torch, results)
    return results


def mark(ok):
    return "ok" if ok else "MISSED"


def report_matmul(burnc, notes, torch_res):
    names = [n for n in MATMUL if n in torch_res]
    if not names:
        return
    print("\nmatmul, burnc / cuBLAS (torch.matmul), same run (TFLOP/s; > 1 means burnc is faster):")
    print("%-12s %6s %10s %10s %8s  %s" % ("workload", "size", "burnc", "cuBLAS", "ratio", "target"))
    for name in [n for n in names if n in MM_KINDS]:
        target = MM_KINDS[name][2]
        for n in MM_SIZES:
            t = torch_res[name][n]["tflops"]
            b = burnc.get(name, {}).get("tflops_%d" % n)
            if b is None:
                print("%-12s %6d %10s %10.1f %8s  burnc: no result (%s)" % (name, n, "-", t, "-",
                                                                            notes.get(name) or "not run"))
                continue
            print("%-12s %6d %10.1f %10.1f %7.2fx  >= %.1f %s" % (name, n, b, t, b / t, target, mark(b / t >= target)))
    if "matmul_gelu" in names:
        for dtype, prefix in (("float32", ""), ("bfloat16", "bf16_")):
            t = torch_res["matmul_gelu"][dtype]
            b = burnc.get("matmul_gelu", {})
            if prefix + "fused_ms" not in b or b.get("size") != EPI_N:
                print("matmul_gelu  %s: burnc: no result at %d (%s)"
                      % (dtype, EPI_N, notes.get("matmul_gelu") or "not run"))
                continue
            f, a = b[prefix + "fused_ms"], b[prefix + "apart_ms"]
            r = t["compile_ms"] / f
            print("matmul_gelu  %s %d^3: burnc fused %.3f ms (apart %.3f ms); PyTorch eager %.3f ms, torch.compile "
                  "%.3f ms: %.2fx of torch.compile (>= %.1f %s), %.2fx of eager"
                  % (dtype, EPI_N, f, a, t["eager_ms"], t["compile_ms"], r, EPI_TARGET, mark(r >= EPI_TARGET),
                     t["eager_ms"] / f))


def report_train(burnc, notes, torch_res):
    names = [n for n in TRAIN if n in torch_res]
    if not names:
        return
    print("\ntraining step, host time per step with a sync, medians (ratios > 1 mean burnc is faster):")
    for name in names:
        t, b = torch_res[name], burnc.get(name, {})
        if "step fused" not in b:
            print("%-10s burnc: no result (%s); PyTorch eager %.3f ms, torch.compile %.3f ms"
                  % (name, notes.get(name) or "not run", t["eager_ms"], t["compile_ms"]))
            continue
        f, e = b["step fused"], b["step eager"]
        print("%-10s burnc fused %.3f ms, eager %.3f ms: fused/eager %.2fx; PyTorch eager %.3f ms, "
              "torch.compile %.3f ms; burnc fused vs PyTorch eager %.2fx (>= %.1f %s), vs torch.compile %.2fx"
              % (name, f, e, e / f, t["eager_ms"], t["compile_ms"], t["eager_ms"] / f, TRAIN_FLOOR,
                 mark(t["eager_ms"] / f >= TRAIN_FLOOR), t["compile_ms"] / f))
        if "step fused, balanced ckpt" in b:
            c = b["step fused, balanced ckpt"]
            print("%-10s with balanced checkpointing: burnc fused %.3f ms (%.2fx its step without), vs PyTorch "
                  "eager %.2fx (>= %.1f %s)" % ("", c, f / c, t["eager_ms"] / c, TRAIN_FLOOR,
                                                mark(t["eager_ms"] / c >= TRAIN_FLOOR)))
        if "peak MB, no checkpointing" in b:
            print("%-10s peak: burnc forward+backward %.0f MB (balanced checkpointing %.0f MB); PyTorch eager step "
                  "%.0f MB" % ("", b["peak MB, no checkpointing"], b["peak MB, balanced"], t["eager_peak_mb"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", required=True, help="the burnc-bench executable")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--reps", type=int, default=11)
    ap.add_argument("--json", help="write both sides' figures here")
    ap.add_argument("--skip-compile-time", action="store_true", help="do not time torch.compile's first call")
    ap.add_argument("names", nargs="*", help="workloads or groups: matmul, train, all (default: %s)"
                    % " ".join(MEMORY))
    args = ap.parse_args()
    known = GROUPS["all"]
    chosen = []
    for n in args.names or MEMORY:
        if n not in known and n not in GROUPS:
            sys.exit("compare_torch: unknown workload %s (known: %s; groups: %s)"
                     % (n, " ".join(known), " ".join(GROUPS)))
        chosen += GROUPS.get(n, [n])
    wanted = [n for n in known if n in chosen]
    args.names = wanted  # burnc-bench takes them as filters (a name selects those that contain it)

    burnc, notes = run_burnc(args)
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
    report_matmul(burnc, notes, torch_res)
    report_train(burnc, notes, torch_res)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"burnc": burnc, "torch": torch_res}, f, indent=1)


if __name__ == "__main__":
    main()
