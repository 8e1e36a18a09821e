#!/usr/bin/env python3
"""Per-kernel GPU time of PyTorch's steps that bench/compare_torch.py times, from torch.profiler:
what cuBLAS and the element-wise kernels take, to set beside BURNC_CUDA_PROFILE=1's table.

    scripts/gpu/torch_profile.py [train_deep|train_mlp|matmul_gelu] [eager|compile]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import compare_torch  # noqa: E402
import torch  # noqa: E402


def main():
    name = sys.argv[1] if len(sys.argv) > 1 else "train_deep"
    mode = sys.argv[2] if len(sys.argv) > 2 else "eager"
    dev = torch.device("cuda")
    if name == "matmul_gelu":
        n = 4096
        a, b = torch.randn(n, n, device=dev), torch.randn(n, n, device=dev)
        bias = torch.randn(n, device=dev)
        f = lambda: torch.nn.functional.gelu(a @ b + bias)  # noqa: E731
        step = torch.compile(f) if mode == "compile" else f
    else:
        model, opt, loss_fn, x, y = compare_torch.train_model(name, torch, dev)
        fwd = lambda x, y: loss_fn(model(x), y)  # noqa: E731
        ost = opt.step
        if mode == "compile":
            fwd, ost = torch.compile(fwd), torch.compile(ost, fullgraph=False)

        def step():
            opt.zero_grad(set_to_none=True)
            fwd(x, y).backward()
            ost()
    for _ in range(8):
        step()
    torch.cuda.synchronize()
    reps = 10
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            step()
        torch.cuda.synchronize()
    rows, total = {}, 0.0
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            us = e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
            r = rows.setdefault(e.name, [0, 0.0])
            r[0] += 1
            r[1] += us
            total += us
    print(f"{name} {mode}: {total / reps / 1e3:.3f} ms of kernels a step")
    for k, (c, us) in sorted(rows.items(), key=lambda kv: -kv[1][1]):
        print(f"{us / reps:9.1f} us  {c / reps:5.1f}x  {k[:150]}")


if __name__ == "__main__":
    main()
