#!/usr/bin/python3
"""Writes the nn suite's data (tests/test_nn.c) with numpy only:

  dtypes.safetensors  one tensor of every safetensors dtype burnc reads, with values the test
                      knows, a scalar, an empty tensor, an escaped name and __metadata__; the
                      header laid out as the safetensors library writes it (compact JSON padded
                      with spaces to 8 bytes), the data packed in an order unlike the header's.
  golden.safetensors  inputs and expected outputs of the layers, losses and optimizers,
                      computed here in float64 and rounded to float32.

Run from anywhere: python3 gen_nn.py (writes beside itself)."""
import json
import os
import struct

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def bf16_bits(a):
    """float32 -> bfloat16 bit patterns, round to nearest even (numpy has no bf16)."""
    u = np.asarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def write_safetensors(path, tensors, metadata=None, order=None):
    """tensors: list of (name, dtype string, shape, raw little-endian bytes). `order` permutes
    where the data goes, to check a reader that sorts by offset."""
    order = order or list(range(len(tensors)))
    offsets, off = {}, 0
    for i in order:
        name, _, _, raw = tensors[i]
        offsets[name] = (off, off + len(raw))
        off += len(raw)
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dt, shape, raw in tensors:
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": list(offsets[name])}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-(8 + len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for i in order:
            f.write(tensors[i][3])


def le(a, dt):
    return np.ascontiguousarray(a, dtype=np.dtype(dt).newbyteorder("<")).tobytes()


def dtypes_file():
    f32 = np.array([[1.5, -2.25, 3.0], [0.1, 1e-30, -7e5]], dtype=np.float32)
    f64 = np.array([np.pi, -1e300, 5e-324], dtype=np.float64)
    f16 = np.array([1.0, -0.5, 65504.0, 6e-8], dtype=np.float16)
    bf16 = bf16_bits(np.array([[1.0, -3.140625], [1e38, 2.0**-130]], dtype=np.float32))
    i32 = np.array([-2147483648, 0, 2147483647], dtype=np.int32)
    i64 = np.array([-(2**62) - 5, 2**62 + 7], dtype=np.int64)
    u8 = np.array([0, 1, 127, 128, 255], dtype=np.uint8)
    bools = np.array([True, False, False, True], dtype=np.bool_)
    scalar = np.array(42.5, dtype=np.float32)
    empty = np.zeros((0, 3), dtype=np.float32)
    tensors = [
        ("f32", "F32", f32.shape, le(f32, np.float32)),
        ("f64", "F64", f64.shape, le(f64, np.float64)),
        ("f16", "F16", f16.shape, le(f16, np.float16)),
        ("bf16", "BF16", bf16.shape, le(bf16, np.uint16)),
        ("i32", "I32", i32.shape, le(i32, np.int32)),
        ("i64", "I64", i64.shape, le(i64, np.int64)),
        ("u8", "U8", u8.shape, u8.tobytes()),
        ("bool", "BOOL", bools.shape, bools.astype(np.uint8).tobytes()),
        ("scalar", "F32", (), le(scalar, np.float32)),
        ("empty", "F32", empty.shape, b""),
        ('layer.0/\u00fcn\u00efc\u00f8de "q"', "F32", (1,), le(np.array([-1.0]), np.float32)),
    ]
    order = [6, 0, 3, 1, 10, 2, 8, 4, 9, 5, 7]
    write_safetensors(os.path.join(HERE, "dtypes.safetensors"), tensors, {"format": "pt", "note": "numpy"}, order)


def f32(a):
    return np.asarray(a, dtype=np.float64).astype(np.float32)


def golden_file():
    rng = np.random.default_rng(20261129)
    out = []

    def put(name, a, dt=np.float32):
        a = np.asarray(a).astype(dt)
        code = {np.float32: "F32", np.int64: "I64"}[dt]
        out.append((name, code, a.shape, le(a, dt)))

    # Linear: y = x W^T + b, W [out, in] (PyTorch's layout)
    x = f32(rng.standard_normal((4, 5)))
    w = f32(rng.standard_normal((3, 5)) * 0.5)
    b = f32(rng.standard_normal(3))
    put("linear.x", x), put("linear.weight", w), put("linear.bias", b)
    put("linear.y", x.astype(np.float64) @ w.astype(np.float64).T + b)

    # LayerNorm over the last axis, affine, eps 1e-5
    x = f32(rng.standard_normal((4, 6)) * 3 + 1)
    g = f32(rng.standard_normal(6))
    beta = f32(rng.standard_normal(6))
    xd = x.astype(np.float64)
    mu = xd.mean(axis=1, keepdims=True)
    var = ((xd - mu) ** 2).mean(axis=1, keepdims=True)
    put("ln.x", x), put("ln.weight", g), put("ln.bias", beta)
    put("ln.y", (xd - mu) / np.sqrt(var + 1e-5) * g + beta)

    # Embedding
    table = f32(rng.standard_normal((7, 3)))
    idx = np.array([[0, 6, 3], [3, 1, 5]], dtype=np.int64)
    put("emb.weight", table), put("emb.idx", idx, np.int64), put("emb.y", table[idx])

    # Cross-entropy (mean over the batch of -log_softmax[label]) and MSE
    logits = f32(rng.standard_normal((5, 4)) * 2)
    labels = np.array([3, 0, 1, 3, 2], dtype=np.int64)
    ld = logits.astype(np.float64)
    m = ld.max(axis=1, keepdims=True)
    lsm = ld - m - np.log(np.exp(ld - m).sum(axis=1, keepdims=True))
    put("ce.logits", logits), put("ce.labels", labels, np.int64)
    put("ce.loss", -lsm[np.arange(5), labels].mean())
    pred = f32(rng.standard_normal((3, 4)))
    target = f32(rng.standard_normal((3, 4)))
    put("mse.pred", pred), put("mse.target", target)
    put("mse.loss", ((pred.astype(np.float64) - target) ** 2).mean())

    # Optimizers: three steps from p0 with the gradients g[0..2] (torch.optim's formulas)
    p0 = f32(rng.standard_normal(10))
    grads = f32(rng.standard_normal((3, 10)))
    put("opt.p0", p0), put("opt.grads", grads)

    def sgd(lr, mom, wd, nesterov):
        p, buf = p0.astype(np.float64), None
        for t in range(3):
            gr = grads[t] + wd * p
            if mom:
                buf = gr if buf is None else mom * buf + gr
                gr = gr + mom * buf if nesterov else buf
            p = p - lr * gr
        return p

    def adam(lr, b1, b2, eps, wd, decoupled):
        p = p0.astype(np.float64)
        m = np.zeros_like(p)
        v = np.zeros_like(p)
        for t in range(1, 4):
            gr = grads[t - 1].astype(np.float64)
            if decoupled:
                p = p * (1 - lr * wd)
            else:
                gr = gr + wd * p
            m = b1 * m + (1 - b1) * gr
            v = b2 * v + (1 - b2) * gr * gr
            denom = np.sqrt(v) / np.sqrt(1 - b2**t) + eps
            p = p - lr / (1 - b1**t) * m / denom
        return p

    put("sgd.p3", sgd(0.1, 0.0, 0.0, False))
    put("sgd_momentum.p3", sgd(0.1, 0.9, 0.01, False))
    put("sgd_nesterov.p3", sgd(0.05, 0.8, 0.0, True))
    put("adam.p3", adam(0.01, 0.9, 0.999, 1e-8, 0.01, False))
    put("adamw.p3", adam(0.01, 0.9, 0.99, 1e-6, 0.1, True))
    write_safetensors(os.path.join(HERE, "golden.safetensors"), out)


if __name__ == "__main__":
    dtypes_file()
    golden_file()
