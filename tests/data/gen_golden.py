#!/usr/bin/python3
"""Golden vectors for tests/test_ops.c.

Run from anywhere: `/usr/bin/python3 tests/data/gen_golden.py` rewrites tests/data/ops_*.bin
(`--seed N --out DIR` writes other random inputs elsewhere, to stress the tolerances).
Needs only the standard library and numpy. Deterministic: the same files on every run.

How expected values are made (see also the tolerance notes in test_ops.c):
  * Every input is exactly representable in its dtype. Expected values are computed from those
    exact values in double (libm through Python's `math`, i.e. glibc, never numpy's f32
    functions), or exactly with Python integers and Fractions, and rounded ONCE to the output
    dtype by round_exact()/round_bits() below (integer bit operations, round to nearest even:
    no numpy float16 conversion and no f64 -> f32 -> bf16 double rounding).
  * Integer semantics (wrapping, floor division, pow with negative exponents, division by zero,
    float -> int saturation) follow include/burnc.h and are computed with Python integers.
  * Composite ops (softmax, log_softmax) are reproduced op by op, rounding after each step.

File format (little endian), one file per op family:
  "BGLD" u32 version u32 ncases, then per case:
    str op, str name, str params            (str = u16 length + utf-8 bytes)
    u8 nin, nin x (tensor, str view)
    tensor expected
    u8 tol_kind (0 exact, 1 numeric); numeric only: 6 x f64: ulps, rtol, atol (vs golden on any
      device and vs ref), then ulps, rtol, atol added on devices other than ref.
  tensor = u8 dtype (burnc_dtype_t), u8 rank, rank x i64 shape, u32 nbytes, zero padding to a
           multiple of 8 from the file start, nbytes of dense row-major data.
  view   = "" or steps separated by '|': permute:p0,p1,.. transpose:a,b slice:axis,start,stop,step
           flip:axes expand:shape unsqueeze:axis squeeze:axes; applied in C to the tensor made
           from the stored data before the op, and here by apply_view() to its copy.
  params = "key=value;..." (ints, int lists "a,b,c", doubles as float.hex()).
"""

import math
import os
import struct
import sys
from fractions import Fraction

import numpy as np

np.seterr(all="ignore")
HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = HERE
SEED = 0x5EED_B0C  # the committed data; --seed N makes other data to stress the tolerances
rng = np.random.default_rng(SEED)

DTYPES = ["f32", "f64", "f16", "bf16", "i32", "i64", "u8", "bool"]
DT_CODE = {"f32": 1, "f64": 2, "f16": 3, "bf16": 4, "i32": 5, "i64": 6, "u8": 7, "bool": 8}
FLOATS = ["f32", "f64", "f16", "bf16"]
INTS = ["i32", "i64", "u8"]
DEFAULT_FLOAT = "f32"  # the device default (tests never configure it)
INT_RANGE = {"i32": (-(1 << 31), (1 << 31) - 1), "i64": (-(1 << 63), (1 << 63) - 1), "u8": (0, 255)}
# precision p (bits incl. the implicit one), emin, emax
FMT = {"f16": (11, -14, 15), "bf16": (8, -126, 127), "f32": (24, -126, 127), "f64": (53, -1022, 1023)}
EPS = {dt: 2.0 ** (1 - FMT[dt][0]) for dt in FMT}  # ulp of 1.0
INT64_MAX, INT64_MIN = (1 << 63) - 1, -(1 << 63)


def is_float(dt):
    return dt in FLOATS


def is_int(dt):
    return dt in INTS


# ---- rounding ------------------------------------------------------------------------------

def max_finite(dt):
    p, _, emax = FMT[dt]
    return (2.0 - 2.0 ** (1 - p)) * 2.0 ** emax


def min_subnormal(dt):
    p, emin, _ = FMT[dt]
    return 2.0 ** (emin - (p - 1))


def min_normal(dt):
    return 2.0 ** FMT[dt][1]


def round_exact(v, dt):
    """Any int, Fraction or float, rounded once to dt (nearest, ties to even); a Python float."""
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v) or v == 0.0):
        return v
    f = Fraction(v)
    if f == 0:
        return 0.0
    neg = f < 0
    a = -f if neg else f
    p, emin, emax = FMT[dt]
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if a < Fraction(2) ** e:
        e -= 1
    q = max(e, emin) - (p - 1)
    n = round(a / Fraction(2) ** q)  # Fraction rounding is half to even
    r = Fraction(n) * Fraction(2) ** q
    res = math.inf if r > Fraction(max_finite(dt)) else float(r)
    return -res if neg else res


def round_bits(x, dt):
    """A double rounded once to dt with integer operations on its bits."""
    if math.isnan(x) or math.isinf(x) or x == 0.0 or dt == "f64":
        return x
    p, emin, emax = FMT[dt]
    u = struct.unpack("<Q", struct.pack("<d", x))[0]
    neg = u >> 63
    ef = (u >> 52) & 0x7FF
    mant = u & ((1 << 52) - 1)
    if ef == 0:  # f64 subnormal: value mant * 2^-1074
        m, e2 = mant, -1074
    else:
        m, e2 = mant | (1 << 52), ef - 1075
    lead = e2 + m.bit_length() - 1  # exponent of the leading bit
    q = max(lead, emin) - (p - 1)  # exponent of the target ulp
    shift = q - e2
    if shift <= 0:
        r = m << -shift
    elif shift > 60:
        r = 0  # below half of the smallest subnormal
    else:
        r = m >> shift
        rem = m & ((1 << shift) - 1)
        half = 1 << (shift - 1)
        if rem > half or (rem == half and (r & 1)):
            r += 1
    if r.bit_length() + q > emax + 1:  # past max_finite (also past double's range)
        res = math.inf
    else:
        res = math.ldexp(float(r), q)
        if res > max_finite(dt):
            res = math.inf
    return -res if neg else res


def rnd(x, dt):
    """Vectorised round_bits over an array (any shape); float64 result."""
    a = np.asarray(x, dtype=np.float64)
    if dt == "f64":
        return a.copy()
    out = np.array([round_bits(float(v), dt) for v in a.ravel()], dtype=np.float64)
    return out.reshape(a.shape)


def ulp(x, dt):
    p, emin, _ = FMT[dt]
    if x == 0 or not math.isfinite(x):
        return 2.0 ** (emin - (p - 1))
    e = max(math.frexp(abs(x))[1] - 1, emin)
    return 2.0 ** (e - (p - 1))


def f2i(x, dt):
    """Float -> integer cast rules of the header: truncate, saturate, NaN -> 0; bool: != 0."""
    if dt == "bool":
        return int(x != 0)
    if math.isnan(x):
        return 0
    lo, hi = INT_RANGE[dt]
    if math.isinf(x):
        return hi if x > 0 else lo
    return min(max(math.trunc(x), lo), hi)


def wrap(v, dt):
    v = int(v)
    if dt == "bool":
        return int(v != 0)
    if dt == "u8":
        return v & 0xFF
    bits = 32 if dt == "i32" else 64
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >= 1 << (bits - 1) else v


def scalar_to(s, dt):
    """A C double scalar converted to dt (what the _scalar ops, clamp, full and pad do)."""
    if is_float(dt):
        return round_bits(float(s), dt)
    return f2i(float(s), dt)


# ---- tensors -------------------------------------------------------------------------------

class T:
    """A tensor of the generator: dtype and exact values (float64 for floats, int64 else)."""

    def __init__(self, dt, v):
        self.dt = dt
        if is_float(dt):
            self.v = np.array(v, dtype=np.float64)
        else:
            self.v = np.array(v, dtype=object).astype(np.int64) if np.ndim(v) else np.array(int(v), dtype=np.int64)
            if dt == "bool":
                self.v = (self.v != 0).astype(np.int64)

    @property
    def shape(self):
        return self.v.shape


def tobytes(t):
    v = t.v
    dt = t.dt
    if dt == "f64":
        return v.astype("<f8").tobytes()
    if dt == "f32":
        return v.astype("<f4").tobytes()
    if dt == "f16":
        return v.astype("<f2").tobytes()  # exact: the values are f16 values
    if dt == "bf16":
        b = v.astype("<f4").view("<u4") >> 16  # exact: bf16 values are f32 values
        return b.astype("<u2").tobytes()
    if dt == "i32":
        return v.astype("<i4").tobytes()
    if dt == "i64":
        return v.astype("<i8").tobytes()
    return v.astype("u1").tobytes()


def conv(t, dt):
    """t's values converted to dt by the cast rules."""
    if t.dt == dt:
        return T(dt, t.v.copy())
    flat = t.v.ravel().tolist()
    if is_float(dt):
        if is_float(t.dt):
            out = [round_bits(float(x), dt) for x in flat]
        else:
            out = [round_exact(int(x), dt) for x in flat]
        return T(dt, np.array(out, dtype=np.float64).reshape(t.shape))
    if is_float(t.dt):
        out = [f2i(float(x), dt) for x in flat]
    else:
        out = [wrap(int(x), dt) for x in flat]
    return T(dt, np.array(out, dtype=object).reshape(t.shape))


RANKS = {"bool": 0, "u8": 1, "i32": 2, "i64": 3, "f16": 4, "bf16": 4, "f32": 5, "f64": 6}


def promote(a, b):
    if {a, b} == {"f16", "bf16"}:
        return "f32"
    return a if RANKS[a] >= RANKS[b] else b


# ---- views ---------------------------------------------------------------------------------

def parse_view(vs):
    steps = []
    for part in vs.split("|") if vs else []:
        kind, _, args = part.partition(":")
        steps.append((kind, [int(a) for a in args.split(",")] if args else []))
    return steps


def apply_view(a, vs):
    for kind, n in parse_view(vs):
        if kind == "permute":
            a = np.transpose(a, n)
        elif kind == "transpose":
            a = np.swapaxes(a, n[0], n[1])
        elif kind == "slice":
            ax = n[0] % a.ndim
            a = a[(slice(None),) * ax + (slice(n[1], n[2], n[3]),)]
        elif kind == "flip":
            a = np.flip(a, axis=tuple(n)) if n else np.flip(a)
        elif kind == "expand":
            shape = list(n)
            off = len(shape) - a.ndim
            for i in range(a.ndim):
                if shape[off + i] == -1:
                    shape[off + i] = a.shape[i]
            a = np.broadcast_to(a, shape)
        elif kind == "unsqueeze":
            a = np.expand_dims(a, n[0])
        elif kind == "squeeze":
            a = np.squeeze(a, axis=tuple(n)) if n else np.squeeze(a)
        else:
            raise ValueError(kind)
    return a


class In:
    """An op input: stored tensor plus the view C applies before the op."""

    def __init__(self, t, view=""):
        self.t = t
        self.view = view

    def value(self):
        return T(self.t.dt, np.array(apply_view(self.t.v, self.view)))


def as_in(x):
    return x if isinstance(x, In) else In(x)


# ---- tolerances ----------------------------------------------------------------------------

EXACT = (0, 0, 0, 0, 0, 0, 0)


def numeric(ulps=0.0, rtol=0.0, atol=0.0, ulps2=0.0, rtol2=0.0, atol2=0.0):
    return (1, float(ulps), float(rtol), float(atol), float(ulps2), float(rtol2), float(atol2))


# ---- writer --------------------------------------------------------------------------------

class Writer:
    def __init__(self, name):
        self.name = name
        self.cases = []
        self.count = {}

    def add(self, op, name, params, ins, out, tol=EXACT):
        ins = [as_in(i) for i in ins]
        # sanity: what C will build must match what numpy saw
        self.cases.append((op, name, params, ins, out, tol))
        key = (op, out.dt if out is not None else "-")
        self.count[key] = self.count.get(key, 0) + 1

    def write(self):
        buf = bytearray()

        def s(x):
            b = x.encode()
            buf.extend(struct.pack("<H", len(b)))
            buf.extend(b)

        def tensor(t):
            buf.extend(struct.pack("<BB", DT_CODE[t.dt], t.v.ndim))
            for d in t.v.shape:
                buf.extend(struct.pack("<q", d))
            data = tobytes(t)
            buf.extend(struct.pack("<I", len(data)))
            while len(buf) % 8:
                buf.append(0)
            buf.extend(data)

        buf.extend(b"BGLD")
        buf.extend(struct.pack("<II", 1, len(self.cases)))
        for op, name, params, ins, out, tol in self.cases:
            s(op)
            s(name)
            s(params)
            buf.extend(struct.pack("<B", len(ins)))
            for i in ins:
                tensor(i.t)
                s(i.view)
            tensor(out)
            buf.extend(struct.pack("<B", tol[0]))
            if tol[0]:
                buf.extend(struct.pack("<6d", *tol[1:]))
        path = os.path.join(OUT_DIR, "ops_" + self.name + ".bin")
        with open(path, "wb") as f:
            f.write(bytes(buf))
        return len(buf)


def hx(x):
    return float(x).hex()


def ints(xs):
    return ",".join(str(int(x)) for x in xs)


# ---- input values --------------------------------------------------------------------------

def rand_t(dt, shape, lo=-4.0, hi=4.0):
    shape = tuple(shape)
    if is_float(dt):
        return T(dt, rnd(rng.uniform(lo, hi, shape), dt))
    if dt == "bool":
        return T(dt, rng.integers(0, 2, shape))
    ilo, ihi = INT_RANGE[dt]
    lo_i = max(int(math.floor(lo)), ilo)
    hi_i = min(int(math.ceil(hi)), ihi)
    return T(dt, rng.integers(lo_i, hi_i + 1, shape))


def specials(dt, no_inf=False):
    vals = [math.nan, math.inf, -math.inf, 0.0, -0.0, min_subnormal(dt), -min_subnormal(dt),
            3 * min_subnormal(dt), max_finite(dt), -max_finite(dt), min_normal(dt), 1.0, -1.0, 0.5,
            -0.5, 1.5, 2.5, -2.5, 3.0, 0.75, -7.0, 1e-3]
    if no_inf:
        vals = [v for v in vals if not math.isinf(v)]
    return T(dt, rnd(np.array(vals), dt))


def int_extremes(dt):
    lo, hi = INT_RANGE[dt]
    vals = [0, 1, 2, 3, 7, lo, hi, lo + 1, hi - 1, 100, 255, 128, 127, 16]
    if dt != "u8":
        vals += [-1, -2, -3, -7, -100, -128]
    return T(dt, [v for v in vals if lo <= v <= hi])


# ---- element-wise semantics ----------------------------------------------------------------

def lm(name):
    mf = getattr(math, name)
    nf = getattr(np, name)

    def f(x):
        try:
            return mf(x)
        except (ValueError, OverflowError):
            return float(nf(np.float64(x)))
    return f


def f64(x):
    return np.float64(x)


def sigmoid(x):
    if x >= 0:
        return float(f64(1.0) / (f64(1.0) + f64(lm("exp")(-x))))
    e = lm("exp")(x)
    return float(f64(e) / (f64(1.0) + f64(e)))


def sign_f(x):
    if x > 0:
        return 1.0
    if x < 0:
        return -1.0
    return 0.0 if x == 0 else x


def maximum_f(a, b):
    return a if (a > b or math.isnan(a)) else b


def minimum_f(a, b):
    return a if (a < b or math.isnan(a)) else b


def fma(a, b, c):
    """a * b + c rounded once (Python 3.11 has no math.fma): exact in Fraction, then rounded."""
    return float(Fraction(a) * Fraction(b) + Fraction(c))


SQRT1_2, SQRT1_2_LO = float.fromhex("0x1.6a09e667f3bcdp-1"), float.fromhex("-0x1.bdd3413b26456p-55")
TWO_OVER_SQRTPI = float.fromhex("0x1.20dd750429b6dp+0")


def gelu(x):
    """x/2 erfc(-x/sqrt 2), the steps of ir/scalar.c in double: the argument is th + tl and
    erfc(th + tl) = erfc(th) - tl (2/sqrt pi) e^(-th^2), since a rounded argument would cost up
    to 11 bits (erfc's relative condition number is 2 t^2)."""
    if math.isnan(x):
        return x
    th = -x * SQRT1_2
    tl = 0.0 if math.isinf(th) else fma(-x, SQRT1_2_LO, fma(-x, SQRT1_2, -th))
    s = fma(-(tl * TWO_OVER_SQRTPI), math.exp(-(th * th)), math.erfc(th))
    return 0.5 * x * s

INV_SQRT_2PI = float.fromhex("0x1.9884533d43651p-2")


def gelu_grad(x):
    """gelu'(x) = Phi(x) + x phi(x), the steps of ir/scalar.c in double: Phi(x) = erfc(th + tl)/2
    as in gelu, phi(x) = e^(-p) (1 - pl - 2 th tl) / sqrt(2 pi) with th^2 = p + pl exactly; the
    limits 1 and -0 from |x| = 40 on."""
    if math.isnan(x):
        return x
    if abs(x) >= 40.0:
        return 1.0 if x > 0 else -0.0
    th = -x * SQRT1_2
    tl = fma(-x, SQRT1_2_LO, fma(-x, SQRT1_2, -th))
    p = th * th
    pl = fma(th, th, -p)
    d = math.exp(-p)
    s = fma(-(tl * TWO_OVER_SQRTPI), d, math.erfc(th))
    xc = x * INV_SQRT_2PI * fma(-2.0 * th, tl, 1.0 - pl)
    return fma(xc, d, 0.5 * s)


UNARY_F = {
    "neg": lambda x: -x,
    "abs": math.fabs,
    "sign": sign_f,
    "exp": lm("exp"),
    "exp2": lm("exp2"),
    "expm1": lm("expm1"),
    "log": lm("log"),
    "log2": lm("log2"),
    "log1p": lm("log1p"),
    "sqrt": lm("sqrt"),
    "rsqrt": lambda x: float(f64(1.0) / np.sqrt(f64(x))),
    "reciprocal": lambda x: float(f64(1.0) / f64(x)),
    "sin": lm("sin"),
    "cos": lm("cos"),
    "tan": lm("tan"),
    "tanh": lm("tanh"),
    "sigmoid": sigmoid,
    "relu": lambda x: maximum_f(x, 0.0),
    "gelu": gelu,
    "gelu_grad": gelu_grad,
    "silu": lambda x: float(f64(x) * f64(sigmoid(x))),
    "erf": math.erf,
    "floor": lambda x: float(np.floor(x)),
    "ceil": lambda x: float(np.ceil(x)),
    "round": lambda x: float(np.round(x)),
}
UNARY_I = {
    "neg": lambda x: -x,
    "abs": abs,
    "sign": lambda x: (x > 0) - (x < 0),
    "relu": lambda x: max(x, 0),
    "floor": lambda x: x,
    "ceil": lambda x: x,
    "round": lambda x: x,
}
FLOAT_MATH = ["exp", "exp2", "expm1", "log", "log2", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan",
              "tanh", "sigmoid", "gelu", "gelu_grad", "silu", "erf"]
# results of one correctly rounded IEEE operation (or exact): compared bitwise
UNARY_EXACT = {"neg", "abs", "sign", "sqrt", "reciprocal", "relu", "floor", "ceil", "round", "logical_not"}
# f64 results: allowed ulps (libm vs libm: one call = 2 ulps; composites of several roundings 4)
F64_ULPS = {"rsqrt": 2, "sigmoid": 4, "silu": 4, "gelu": 4, "gelu_grad": 4}
# absolute error allowed on other devices, by dtype: gelu' cancels to 0 at x = -0.7518 (its
# error there is a few ulps of Phi(x) ~ 0.3, not of the result)
ATOL2 = {"gelu_grad": {"f64": 2.0 ** -50, "f32": 2.0 ** -21, "f16": 2.0 ** -21, "bf16": 2.0 ** -21}}
UNARY_DOMAIN = {
    "exp": (-10, 10), "exp2": (-12, 12), "expm1": (-3, 3), "log": (0.01, 100), "log2": (0.01, 100),
    "log1p": (-0.9, 10), "sqrt": (0, 100), "rsqrt": (0.01, 100), "reciprocal": (-10, 10),
    "sin": (-6, 6), "cos": (-6, 6), "tan": (-1.5, 1.5), "tanh": (-5, 5), "sigmoid": (-8, 8),
    "gelu": (-12, 5), "gelu_grad": (-12, 5), "silu": (-8, 8), "erf": (-3, 3),
}
INT_DOMAIN = {"log": (1, 20), "log2": (1, 20), "sqrt": (0, 30), "rsqrt": (1, 30), "log1p": (0, 20)}


def ewise(fn, *arrays):
    """fn over broadcast arrays of Python scalars; an object array."""
    return np.asarray(np.frompyfunc(fn, len(arrays), 1)(*arrays), dtype=object)


def pyvals(t):
    """t's values as an object array of Python floats or ints."""
    return t.v.astype(object)


def unary_expected(op, x):
    """(expected tensor, tolerance) of a unary op on the input tensor value x."""
    if op == "logical_not":
        return T("bool", ewise(lambda a: int(a == 0), pyvals(x))), EXACT
    if is_float(x.dt) or op in FLOAT_MATH:
        if not is_float(x.dt):
            x = conv(x, DEFAULT_FLOAT)
        dt = x.dt
        r = ewise(UNARY_F[op], pyvals(x))
        out = T(dt, rnd(np.array(r, dtype=np.float64), dt))
        if op in UNARY_EXACT:
            return out, EXACT
        # transcendental: the reference computes in double (glibc) and rounds once, as we do,
        # so narrow dtypes agree but at rare rounding boundaries: 1 ulp. Other devices: 4 ulps.
        ulps = F64_ULPS.get(op, 2) if dt == "f64" else 1
        return out, numeric(ulps=ulps, ulps2=3, atol2=ATOL2.get(op, {}).get(dt, 0.0))
    r = ewise(lambda a: wrap(UNARY_I[op](a), x.dt), pyvals(x))
    return T(x.dt, r), EXACT


def gen_unary():
    w = Writer("unary")
    ops = ["neg", "abs", "sign", "exp", "exp2", "expm1", "log", "log2", "log1p", "sqrt", "rsqrt",
           "reciprocal", "sin", "cos", "tan", "tanh", "sigmoid", "relu", "gelu", "gelu_grad", "silu", "erf",
           "floor", "ceil", "round", "logical_not"]
    for op in ops:
        if op == "logical_not":
            dts = DTYPES
        elif op in FLOAT_MATH:
            dts = DTYPES  # integers and bool compute in the default float dtype
        elif op == "reciprocal":
            dts = FLOATS  # the header does not say what reciprocal of an integer is
        else:
            dts = FLOATS + INTS
        for dt in dts:
            if is_float(dt):
                lo, hi = UNARY_DOMAIN.get(op, (-6, 6))
                if op in ("floor", "ceil", "round"):
                    lo, hi = -6, 6
            else:
                lo, hi = INT_DOMAIN.get(op, (-6, 6))
                if dt == "u8":
                    lo = max(lo, 0)
            if op == "reciprocal":
                def gen(shape, _dt=dt):
                    t = rand_t(_dt, shape, 0.05, 10)
                    t.v = t.v * rng.choice([-1.0, 1.0], t.v.shape)
                    return t
            else:
                def gen(shape, _dt=dt, _lo=lo, _hi=hi):
                    t = rand_t(_dt, shape, _lo, _hi)
                    if op in ("round",) and is_float(_dt):  # exact halves
                        t.v = np.where(rng.random(t.v.shape) < 0.3, np.round(t.v * 2) / 2, t.v)
                    return t
            cases = [
                ("scalar", In(gen(()))),
                ("vec", In(gen((23,)))),
                ("empty", In(gen((2, 0, 3)))),
                ("permuted", In(gen((3, 5)), "permute:1,0")),
                ("slice_neg_step", In(gen((5, 6)), "slice:1,-1,-7,-2")),
                ("expanded", In(gen((3, 1)), "expand:2,3,4")),
                ("flipped", In(gen((2, 3, 4)), "flip:0,2")),
                ("rank6", In(gen((2, 1, 3, 1, 2, 2)))),
            ]
            if is_float(dt):
                cases.append(("special", In(specials(dt, no_inf=op in ("gelu", "silu")))))
            elif dt != "bool" and op in ("neg", "abs", "sign", "relu", "logical_not", "floor"):
                cases.append(("extremes", In(int_extremes(dt))))
            if dt == "bool":
                cases = [(n, In(rand_t("bool", i.t.shape), i.view)) for n, i in cases]
            for name, inp in cases:
                out, tol = unary_expected(op, inp.value())
                w.add(op, f"{op}/{dt}/{name}", "", [inp], out, tol)
    return w


# ---- binary --------------------------------------------------------------------------------

def int_pow(a, e):
    if e < 0:
        if a == 1:
            return 1
        if a == -1:
            return -1 if e & 1 else 1
        return 0
    return pow(a, e, 1 << 64)


def pow_f(a, b):
    try:
        return math.pow(a, b)
    except (ValueError, OverflowError):
        return float(np.power(f64(a), f64(b)))


BIN_F = {
    "add": lambda a, b: float(f64(a) + f64(b)),
    "sub": lambda a, b: float(f64(a) - f64(b)),
    "mul": lambda a, b: float(f64(a) * f64(b)),
    "div": lambda a, b: float(f64(a) / f64(b)),
    "pow": pow_f,
    "maximum": maximum_f,
    "minimum": minimum_f,
    "remainder": lambda a, b: float(np.remainder(f64(a), f64(b))),
    "atan2": math.atan2,
}
BIN_I = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: 0 if b == 0 else a // b,
    "pow": int_pow,
    "maximum": max,
    "minimum": min,
    "remainder": lambda a, b: 0 if b == 0 else a % b,
}
CMP = {
    "eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
    "logical_and": lambda a, b: a != 0 and b != 0,
    "logical_or": lambda a, b: a != 0 or b != 0,
    "logical_xor": lambda a, b: (a != 0) != (b != 0),
}
ARITH = ["add", "sub", "mul", "div", "pow", "maximum", "minimum", "remainder", "atan2"]
BIN_OPS = ARITH + list(CMP)


def binary_expected(op, a, b, compute):
    """a and b already converted to `compute`."""
    if op == "atan2" and not is_float(compute):  # a float math function: default float dtype
        a, b, compute = conv(a, DEFAULT_FLOAT), conv(b, DEFAULT_FLOAT), DEFAULT_FLOAT
    av, bv = pyvals(a), pyvals(b)
    if op in CMP:
        r = ewise(lambda x, y: int(CMP[op](x, y)), av, bv)
        return T("bool", r), EXACT
    if is_float(compute):
        r = ewise(BIN_F[op], av, bv)
        out = T(compute, rnd(np.array(r, dtype=np.float64), compute))
        if op in ("pow", "atan2"):
            return out, numeric(ulps=2 if compute == "f64" else 1, ulps2=3)
        return out, EXACT
    r = ewise(lambda x, y: wrap(BIN_I[op](x, y), compute), av, bv)
    return T(compute, r), EXACT


def bin_dtypes(op):
    if op in CMP:
        return DTYPES
    return FLOATS + INTS  # atan2 of integers computes in the default float dtype


def bin_gen(op, dt, shape, side):
    """Inputs that keep an op defined: pow of positive bases, etc."""
    if is_float(dt):
        if op == "pow":
            return rand_t(dt, shape, 0.1, 4) if side == 0 else rand_t(dt, shape, -3, 3)
        if op in ("div", "remainder") and side == 1:
            t = rand_t(dt, shape, 0.25, 5)
            t.v = t.v * rng.choice([-1.0, 1.0], t.v.shape)
            return t
        if op in CMP:  # make ties likely
            return T(dt, rnd(np.round(rng.uniform(-3, 3, shape) * 2) / 2, dt))
        return rand_t(dt, shape, -5, 5)
    if dt == "bool":
        return rand_t(dt, shape)
    if op == "pow":
        return rand_t(dt, shape, -4 if dt != "u8" else 0, 4) if side == 0 else rand_t(dt, shape, -3 if dt != "u8" else 0, 6)
    lo = 0 if dt == "u8" else -9
    return rand_t(dt, shape, lo, 9)


def gen_binary():
    w = Writer("binary")
    for op in BIN_OPS:
        for dt in bin_dtypes(op):
            g = lambda shape, side: bin_gen(op, dt, shape, side)  # noqa: E731
            cases = [
                ("same", In(g((3, 4), 0)), In(g((3, 4), 1))),
                ("bcast_col_row", In(g((3, 1), 0)), In(g((1, 4), 1))),
                ("scalar_lhs", In(g((), 0)), In(g((2, 3), 1))),
                ("scalar_rhs", In(g((4,), 0)), In(g((), 1))),
                ("scalars", In(g((), 0)), In(g((), 1))),
                ("empty", In(g((0, 3), 0)), In(g((1, 3), 1))),
                ("empty_bcast", In(g((2, 1), 0)), In(g((2, 0), 1))),
                ("views", In(g((4, 3), 0), "permute:1,0"), In(g((3, 8), 1), "slice:1,-1,-9,-2")),
                ("expanded_flip", In(g((3, 1), 0), "expand:2,3,5"), In(g((2, 3, 5), 1), "flip:1")),
                ("rank6", In(g((2, 1, 3, 1, 1, 2), 0)), In(g((1, 2, 1, 2, 1, 2), 1))),
            ]
            if is_float(dt):
                sp = specials(dt).v
                cases.append(("special", In(T(dt, sp.reshape(-1, 1))), In(T(dt, sp.reshape(1, -1)))))
            elif dt != "bool":
                ex = int_extremes(dt).v
                lhs, rhs = ex.reshape(-1, 1), ex.reshape(1, -1)
                if op == "pow":
                    rhs = np.array([v for v in [-3, -2, -1, 0, 1, 2, 3, 5, 31, 63, 64]
                                    if INT_RANGE[dt][0] <= v <= INT_RANGE[dt][1]]).reshape(1, -1)
                cases.append(("extremes", In(T(dt, lhs)), In(T(dt, rhs))))
            else:
                cases.append(("all", In(T(dt, [[0], [1]])), In(T(dt, [[0, 1]]))))
            for name, ia, ib in cases:
                a, b = ia.value(), ib.value()
                out, tol = binary_expected(op, a, b, dt)
                w.add(op, f"{op}/{dt}/{name}", "", [ia, ib], out, tol)
        # mixed dtypes: compute in the promoted dtype
        mixes = [("f16", "bf16"), ("bf16", "f16"), ("f16", "f32"), ("bf16", "f64"), ("f32", "f64"),
                 ("i32", "f16"), ("u8", "bf16"), ("i64", "f32"), ("u8", "f64"), ("u8", "i32"),
                 ("i32", "i64"), ("u8", "i64"), ("f32", "i32")]
        if op in CMP:
            mixes += [("bool", "i32"), ("bool", "f16"), ("f32", "bool"), ("bool", "u8")]
        elif op != "atan2":  # bool promotes like numpy: bool + u8 computes in u8
            mixes += [("bool", "u8"), ("i32", "bool"), ("bool", "f16")]
        for da, db in mixes:
            if op == "atan2" and not (is_float(da) and is_float(db)):
                continue
            comp = promote(da, db)
            ia = In(bin_gen(op, da, (2, 3), 0))
            ib = In(bin_gen(op, db, (3,), 1))
            out, tol = binary_expected(op, conv(ia.value(), comp), conv(ib.value(), comp), comp)
            w.add(op, f"{op}/{da}x{db}", "", [ia, ib], out, tol)
    return w


SCALARS = {
    "float": [2.5, -1.0, 0.1, 3.0, -0.0, math.nan, math.inf],
    "int": [2.5, -1.0, 3.0, -7.9, 300.0, 1e10, -1e10, 0.0],
}


def gen_scalar():
    w = Writer("scalar")
    for op in BIN_OPS:
        for dt in bin_dtypes(op):
            svals = SCALARS["float" if is_float(dt) else "int"]
            if dt == "bool":
                svals = [0.0, 1.0, 0.5, -2.0]
            if op == "pow":
                svals = [2.0, 0.5, -1.5, 3.0, 0.0] if is_float(dt) else [2.0, 3.9, -1.0, -2.0, 0.0, 7.0]
            if op == "atan2" and not is_float(dt):
                # integral scalars only: whether s is first truncated to the integer dtype or
                # converted to the float dtype is not said by the header
                svals = [3.0, 0.0, 7.0] + ([-1.0] if dt != "u8" else [])
            if op in ("div", "remainder") and is_float(dt):
                svals = [2.5, -1.0, 0.1, 3.0, -0.0, math.inf]
            for si, s in enumerate(svals):
                shapes = [("vec", In(bin_gen(op, dt, (9,), 0)))]
                if si == 0:
                    shapes += [("scalar", In(bin_gen(op, dt, (), 0))),
                               ("empty", In(bin_gen(op, dt, (0, 2), 0))),
                               ("view", In(bin_gen(op, dt, (3, 4), 0), "permute:1,0|flip:0")),
                               ("rank6", In(bin_gen(op, dt, (1, 2, 1, 3, 2, 1), 0)))]
                if si == 1 and is_float(dt) and op != "pow":
                    shapes.append(("special", In(specials(dt))))
                if si == 1 and is_int(dt):
                    shapes.append(("extremes", In(int_extremes(dt))))
                if op == "pow" and is_int(dt):
                    shapes.append(("bases", In(T(dt, [-3, -2, -1, 0, 1, 2, 3, 5] if dt != "u8" else [0, 1, 2, 3, 5, 200]))))
                for name, ia in shapes:
                    a = ia.value()
                    sv = scalar_to(s, dt)
                    b = T(dt, np.array(sv))
                    out, tol = binary_expected(op, a, b, dt)
                    w.add(op + "_scalar", f"{op}_scalar/{dt}/s={s!r}/{name}", f"s={hx(s)}", [ia], out, tol)
    return w


# ---- where, clamp, cast ----------------------------------------------------------------------

def gen_where_clamp():
    w = Writer("select")
    # where: cond of any dtype, a/b promote
    combos = [(c, d, d) for c in ["bool", "f32", "i32", "u8", "f16"] for d in ["f32"]]
    combos += [("bool", d, d) for d in DTYPES]
    combos += [("bool", "f16", "bf16"), ("i64", "i32", "f64"), ("bool", "u8", "i64"), ("bool", "bool", "u8"),
               ("f64", "bf16", "f32")]
    for ci, (dc, da, db) in enumerate(combos):
        comp = promote(da, db)
        shapes = [("same", (3, 4), (3, 4), (3, 4), ["", "", ""])]
        if ci < 6 or ci == len(combos) - 1:
            shapes += [("bcast", (3, 1), (1, 4), ()),
                       ("scalars", (), (), ()),
                       ("empty", (0, 1), (1, 3), (0, 3)),
                       ("rank6", (2, 1, 3, 1, 2, 1), (1, 2, 1, 1, 1, 2), (2,)),
                       ("views", (4, 3), (3, 8), (2, 3, 1), ["permute:1,0", "slice:1,0,8,2|flip:0",
                                                            "expand:2,3,4|transpose:0,1|transpose:0,1"])]
        for sh in shapes:
            name, sc, sa, sb = sh[:4]
            views = sh[4] if len(sh) > 4 else ["", "", ""]
            if dc == "bool":
                c = T(dc, rng.integers(0, 2, sc))
            elif is_float(dc):
                c = T(dc, rnd(rng.choice([0.0, -0.0, 1.0, math.nan, -2.5, min_subnormal(dc)], sc), dc))
            else:
                c = T(dc, rng.choice([0, 1, 2, 0, 255 if dc == "u8" else -1], sc))
            ic, ia, ib = In(c, views[0]), In(rand_t(da, sa), views[1]), In(rand_t(db, sb), views[2])
            cv = ic.value()
            av, bv = conv(ia.value(), comp), conv(ib.value(), comp)
            cond = (np.isnan(cv.v) | (cv.v != 0)) if is_float(dc) else (cv.v != 0)
            r = np.where(cond, av.v, bv.v)
            w.add("where", f"where/{dc}/{da}x{db}/{name}", "", [ic, ia, ib], T(comp, r))
    # clamp: bounds converted to x's dtype
    bounds = {
        "float": [(-1.0, 2.0), (-math.inf, 0.5), (0.1, math.inf), (3.0, -3.0), (-0.0, 0.0), (0.0, 0.0)],
        "int": [(-2.5, 3.7), (-math.inf, 2.0), (0.0, math.inf), (5.0, 1.0), (-1e12, 1e12), (-300.0, 300.0)],
    }
    for dt in FLOATS + INTS:
        for bi, (lo, hi) in enumerate(bounds["float" if is_float(dt) else "int"]):
            if is_float(dt) and bi == 0:
                xs = [("vec", In(rand_t(dt, (17,), -5, 5))), ("special", In(specials(dt))),
                      ("scalar", In(rand_t(dt, (), -5, 5))), ("empty", In(rand_t(dt, (3, 0)))),
                      ("view", In(rand_t(dt, (4, 5), -5, 5), "permute:1,0|slice:0,0,5,2")),
                      ("rank6", In(rand_t(dt, (2, 1, 2, 3, 1, 2), -5, 5)))]
            elif bi == 0:
                xs = [("vec", In(rand_t(dt, (17,), -9, 9))), ("extremes", In(int_extremes(dt))),
                      ("scalar", In(rand_t(dt, (), -9, 9))), ("view", In(rand_t(dt, (3, 4), -9, 9), "flip:1"))]
            else:
                xs = [("vec", In(specials(dt) if is_float(dt) else int_extremes(dt)))]
            for name, ix in xs:
                x = ix.value()
                l2, h2 = scalar_to(lo, dt), scalar_to(hi, dt)
                if is_float(dt):
                    r = ewise(lambda v: minimum_f(maximum_f(v, l2), h2), pyvals(x))
                    out = T(dt, np.array(r, dtype=np.float64))
                else:
                    out = T(dt, ewise(lambda v: min(max(v, l2), h2), pyvals(x)))
                w.add("clamp", f"clamp/{dt}/[{lo},{hi}]/{name}", f"lo={hx(lo)};hi={hx(hi)}", [ix], out)
    return w


def cast_sources(dt):
    if is_float(dt):
        base = [math.nan, math.inf, -math.inf, 0.0, -0.0, 0.5, -0.5, 0.9999, -0.9999, 1.5, 2.5, -2.7,
                127.5, 128.0, 255.5, 256.0, -1.0, 300.7, -129.0, 2049.0, 2051.0, 257.0, 259.0, 65504.0,
                65519.99, 65520.0, 3.4028235e38 * 1.5, 1e-40, 1e-8, 5.960464477539063e-08,
                2.0 ** 31, -(2.0 ** 31) - 1, 2.0 ** 31 - 0.5, 4.5e15, 9.3e18, -9.3e18, 2.0 ** 63,
                -(2.0 ** 63), 1e300, -1e300, 1e-310, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -8 + 2 ** -30,
                1 + 2 ** -11, 1 + 2 ** -11 + 2 ** -40, 1 + 2 ** -24, 1 + 2 ** -24 + 2 ** -50,
                min_subnormal(dt), -min_subnormal(dt), max_finite(dt), min_normal(dt) * 0.75]
        base += list(rng.normal(0, 100, 12))
        return T(dt, rnd(np.array(base), dt))
    if dt == "bool":
        return T(dt, [0, 1, 1, 0])
    lo, hi = INT_RANGE[dt]
    vals = [0, 1, -1, 2, 127, 128, 255, 256, -129, -128, 65504, 65519, 65520, 2049, 2051, 257, 259,
            16777217, 16777219, hi, lo, hi - 1, lo + 1, (1 << 31) - 1, -(1 << 31), 1 << 31, -(1 << 31) - 1,
            (1 << 53) + 1, (1 << 60) + (1 << 36) + 1, (1 << 60) + (1 << 36), 12345678901, -12345678901,
            (1 << 63) - 1024, (1 << 62) + 1]
    vals += list(rng.integers(lo, hi, 8, endpoint=True))
    return T(dt, [v for v in vals if lo <= v <= hi])


def gen_cast():
    w = Writer("cast")
    for src in DTYPES:
        for dst in DTYPES:
            x = cast_sources(src)
            w.add("cast", f"cast/{src}->{dst}/values", f"dtype={DT_CODE[dst]}", [In(x)], conv(x, dst))
            s = In(T(src, x.v[3:4].reshape(())))
            w.add("cast", f"cast/{src}->{dst}/scalar", f"dtype={DT_CODE[dst]}", [s], conv(s.value(), dst))
            v = In(rand_t(src, (4, 3, 2), -300, 300), "permute:2,0,1|slice:1,-1,-5,-2")
            w.add("cast", f"cast/{src}->{dst}/view", f"dtype={DT_CODE[dst]}", [v], conv(v.value(), dst))
            e = In(rand_t(src, (2, 0)))
            w.add("cast", f"cast/{src}->{dst}/empty", f"dtype={DT_CODE[dst]}", [e], conv(e.value(), dst))
    return w


# ---- reductions ------------------------------------------------------------------------------

def norm_axes(axes, rank):
    return tuple(sorted(a % rank for a in axes)) if axes else tuple(range(rank))


def rows(x, axes):
    """(outer shape, list of rows (lists of Python values)) for reducing `axes` of array x."""
    rank = x.ndim
    ax = norm_axes(axes, rank)
    keep = [d for d in range(rank) if d not in ax]
    xt = np.transpose(x, keep + list(ax))
    outer = tuple(x.shape[d] for d in keep)
    k = int(np.prod([x.shape[d] for d in ax], dtype=np.int64))
    n = int(np.prod(outer, dtype=np.int64))
    flat = np.reshape(xt, (n, k))
    return outer, [flat[i].tolist() for i in range(n)], k


def finish(vals, outer, axes, rank, keepdim, dt):
    arr = np.array(vals, dtype=np.float64 if is_float(dt) else object).reshape(outer)
    if keepdim:
        for d in norm_axes(axes, rank):
            arr = np.expand_dims(arr, d)
    return T(dt, arr)


def fsum_ieee(row):
    if any(math.isnan(v) for v in row) or (math.inf in row and -math.inf in row):
        return math.nan
    if math.inf in row:
        return math.inf
    if -math.inf in row:
        return -math.inf
    return Fraction(sum(Fraction(v) for v in row))


def red_sum(row, dt):
    if not is_float(dt):
        return wrap(sum(row), "i64")
    s = fsum_ieee(row)
    return round_exact(s, dt)


def red_mean(row, dt):
    if not row:
        return math.nan
    s = fsum_ieee(row)
    return round_exact(s / len(row) if isinstance(s, Fraction) else s, dt)


def red_var(row, dt, corr, take_sqrt):
    n = len(row)
    if n - corr <= 0 or any(not math.isfinite(v) for v in row):
        return math.nan
    fr = [Fraction(v) for v in row]
    m = sum(fr) / n
    ss = sum((v - m) ** 2 for v in fr)
    var = ss / (Fraction(n) - Fraction(corr))
    if take_sqrt:
        return round_bits(math.sqrt(float(var)), dt)
    return round_exact(var, dt)


def red_prod(row, dt):
    if not is_float(dt):
        p = 1
        for v in row:
            p = wrap(p * v, "i64")
        return p
    if any(not math.isfinite(v) for v in row):
        return round_bits(float(np.prod(np.array(row, dtype=np.float64))), dt)
    p = Fraction(1)
    for v in row:
        p *= Fraction(v)
    return round_exact(p, dt)


def red_tol(op, dt, k, rowsx):
    """Tolerances of a float reduction. The reference accumulates in double and rounds once: 1
    ulp of the dtype (rounding boundaries) plus the double accumulation error. Other devices
    accumulate f32/f16/bf16 in f32: k * 2^-24 of the absolute sum."""
    if not is_float(dt) or op in ("max", "min"):
        return EXACT
    absmax = max([sum(abs(v) for v in r if math.isfinite(v)) for r in rowsx] + [0.0])
    acc2 = EPS["f64"] if dt == "f64" else EPS["f32"]
    kk = max(k, 1)
    if op == "sum":
        return numeric(ulps=1, atol=2 * kk * EPS["f64"] * absmax, ulps2=1, atol2=2 * kk * acc2 * absmax)
    if op == "mean":
        return numeric(ulps=1, atol=2 * EPS["f64"] * absmax, ulps2=1, atol2=2 * acc2 * absmax)
    if op == "prod":
        return numeric(ulps=1, rtol=2 * kk * EPS["f64"], ulps2=1, rtol2=2 * kk * acc2)
    # var, std: two passes in double on centred data (|mean| <~ std); the mean's own error
    # (k * eps * max|x|) leaves var ~ that squared, std ~ that, where the exact answer is 0
    xmax = max([abs(v) for r in rowsx for v in r if math.isfinite(v)] + [0.0])
    dev1, dev2 = 4 * kk * EPS["f64"] * xmax, 4 * kk * acc2 * xmax
    if op == "std":
        return numeric(ulps=1, rtol=8 * kk * EPS["f64"], atol=dev1, ulps2=2, rtol2=8 * kk * acc2, atol2=dev2)
    return numeric(ulps=1, rtol=8 * kk * EPS["f64"], atol=dev1 * dev1, ulps2=2, rtol2=8 * kk * acc2, atol2=dev2 * dev2)


REDUCE_CASES = [
    # name, shape, view, axes, keepdim
    ("scalar", (), "", [], False),
    ("vec_all", (7,), "", [], False),
    ("axis1", (3, 4), "", [1], False),
    ("axis1_keep", (3, 4), "", [1], True),
    ("neg_axis_keep", (3, 4), "", [-2], True),
    ("axes02", (2, 3, 4), "", [0, 2], False),
    ("neg_axes", (2, 3, 4), "", [-1, 0], True),
    ("all_keep", (2, 3, 4), "", [], True),
    ("empty_axis", (2, 0, 3), "", [1], False),
    ("empty_all", (2, 0, 3), "", [], False),
    ("empty_out", (0, 3), "", [1], True),
    ("rank6", (2, 1, 3, 1, 2, 2), "", [0, 2, -1], False),
    ("permuted", (4, 5), "permute:1,0", [1], False),
    ("sliced_flipped", (6, 5), "slice:0,5,None,-2|flip:1", [0], True),
    ("expanded", (3, 1), "expand:3,5", [1], False),
    ("long", (2, 100), "", [1], False),
    ("long_strided", (90, 2), "transpose:0,1", [-1], False),
]


def red_input(dt, shape, op):
    if op == "prod":
        if is_float(dt):
            t = rand_t(dt, shape, 0.5, 1.6)
            t.v = t.v * rng.choice([-1.0, 1.0], t.v.shape)
            return t
        return rand_t(dt, shape, -3 if dt != "u8" else 0, 3)
    if is_float(dt):
        return rand_t(dt, shape, -3, 3.5)
    if dt == "bool":
        return rand_t(dt, shape)
    return rand_t(dt, shape, 0 if dt == "u8" else -50, 50)


def fix_view(vs, shape):
    return vs.replace("None", str(INT64_MIN))


def gen_reduce():
    w = Writer("reduce")
    for op in ["sum", "mean", "prod", "max", "min", "var", "std"]:
        if op in ("sum", "prod"):
            dts = DTYPES
        elif op in ("max", "min"):
            dts = FLOATS + INTS
        else:
            dts = FLOATS
        for dt in dts:
            cases = list(REDUCE_CASES)
            for name, shape, view, axes, keep in cases:
                if op in ("max", "min") and name in ("empty_axis", "empty_all"):
                    continue  # BURNC_ERR_SHAPE: checked in the semantic tests
                view = fix_view(view, shape)
                corrs = [1.0] if op in ("var", "std") else [None]
                if op in ("var", "std") and name in ("axis1", "vec_all", "scalar", "axes02", "long"):
                    corrs = [0.0, 1.0, 2.5, 7.0]
                for corr in corrs:
                    inp = In(red_input(dt, shape, op), view)
                    x = inp.value()
                    outer, rws, k = rows(x.v, axes)
                    if op == "sum":
                        odt = dt if is_float(dt) else "i64"
                        vals = [red_sum(r, dt) for r in rws]
                    elif op == "prod":
                        odt = dt if is_float(dt) else "i64"
                        vals = [red_prod(r, dt) for r in rws]
                    elif op == "mean":
                        odt, vals = dt, [red_mean(r, dt) for r in rws]
                    elif op in ("var", "std"):
                        odt, vals = dt, [red_var(r, dt, corr, op == "std") for r in rws]
                    else:
                        odt = dt
                        f = max if op == "max" else min
                        vals = [f(r) for r in rws]
                    out = finish(vals, outer, axes, x.v.ndim, keep, odt)
                    params = f"axes={ints(axes)};keepdim={int(keep)}"
                    cname = f"{op}/{dt}/{name}"
                    if corr is not None:
                        params += f";corr={hx(corr)}"
                        cname += f"/corr={corr}"
                    w.add(op, cname, params, [inp], out, red_tol(op, dt, k, rws))
            if is_float(dt):  # NaN and inf propagate
                sp = np.array([[1.0, math.nan, 2.0, -1.0], [math.inf, 1.0, 2.0, 3.0], [-math.inf, math.inf, 0.0, 1.0],
                               [-0.0, -0.0, -0.0, -0.0], [2.0, -3.0, max_finite(dt), max_finite(dt)]])
                if op == "prod":
                    sp[4] = [2.0, 0.5, min_subnormal(dt) * 4, 0.25]  # no intermediate underflow
                elif op not in ("sum", "max", "min"):  # exact mean/var of huge values overflow double sums
                    sp[4] = [2.0, -3.0, 0.25, 1e-3]
                x = T(dt, rnd(sp, dt))
                outer, rws, k = rows(x.v, [1])
                if op == "sum":
                    vals = [red_sum(r, dt) for r in rws]
                elif op == "prod":
                    vals = [red_prod(r, dt) for r in rws]
                elif op == "mean":
                    vals = [red_mean(r, dt) for r in rws]
                elif op in ("var", "std"):
                    vals = [red_var(r, dt, 1.0, op == "std") for r in rws]
                else:
                    vals = [float(np.max(r)) if op == "max" else float(np.min(r)) for r in rws]
                params = "axes=1;keepdim=0" + (f";corr={hx(1.0)}" if op in ("var", "std") else "")
                w.add(op, f"{op}/{dt}/special", params, [In(x)], finish(vals, outer, [1], 2, False, dt),
                      red_tol(op, dt, 4, [[]]) if op not in ("max", "min") else EXACT)
    # argmax / argmin: one axis, first extreme, NaN counts as the extreme
    for op in ["argmax", "argmin"]:
        for dt in FLOATS + INTS:
            cases = [("vec", (9,), "", 0, False), ("vec_neg", (9,), "", -1, True), ("axis0", (4, 5), "", 0, False),
                     ("axis1_keep", (4, 5), "", 1, True), ("neg_axis", (2, 3, 4), "", -2, False),
                     ("rank6", (2, 1, 3, 1, 2, 2), "", 2, True), ("permuted", (3, 6), "permute:1,0", 1, False),
                     ("flipped", (3, 6), "flip:1", 1, False), ("empty_out", (0, 4), "", 1, False),
                     ("expanded", (1, 4), "expand:3,4", 0, True), ("ties", (5, 6), "", 1, False)]
            for name, shape, view, axis, keep in cases:
                if name == "ties":
                    t = T(dt, rnd(rng.integers(0, 3, shape).astype(np.float64), dt) if is_float(dt)
                          else rng.integers(0, 3, shape))
                else:
                    t = red_input(dt, shape, "sum")
                inp = In(t, view)
                x = inp.value()
                r = (np.argmax if op == "argmax" else np.argmin)(x.v, axis=axis)
                if keep:
                    r = np.expand_dims(r, axis)
                w.add(op, f"{op}/{dt}/{name}", f"axis={axis};keepdim={int(keep)}", [inp], T("i64", r))
            if is_float(dt):
                sp = np.array([[1.0, math.nan, 5.0, math.nan], [math.inf, 1.0, math.inf, -math.inf],
                               [-math.inf, -math.inf, 0.0, -0.0], [2.0, 2.0, 2.0, 2.0]])
                x = T(dt, sp)
                r = (np.argmax if op == "argmax" else np.argmin)(x.v, axis=1)
                w.add(op, f"{op}/{dt}/special", "axis=1;keepdim=0", [In(x)], T("i64", r))
    return w


# ---- composites ------------------------------------------------------------------------------

def gen_nn():
    w = Writer("nn")

    def softmax_rows(xv, axis, dt, log):
        """op by op, each rounded to dt: m = max, d = x - m, e = exp(d), s = sum(e), e / s or
        d - log(s)."""
        x = np.moveaxis(xv, axis, -1)
        out = np.empty_like(x)
        flat_in = x.reshape(-1, x.shape[-1]) if x.size else x.reshape(0, x.shape[-1])
        res = []
        lmax = 0.0
        for r in flat_in:
            m = float(np.max(r))
            d = rnd(np.array([float(f64(v) - f64(m)) for v in r]), dt)
            e = rnd(np.array([lm("exp")(float(v)) for v in d]), dt)
            s = round_exact(fsum_ieee(e.tolist()), dt)
            if log:
                ls = round_bits(lm("log")(s), dt)
                lmax = max(lmax, abs(ls))
                res.append(rnd(d - ls, dt))
            else:
                res.append(rnd(e / s, dt))
        if res:
            out = np.array(res).reshape(x.shape)
        return np.moveaxis(out, -1, axis), lmax

    for op in ["softmax", "log_softmax"]:
        for dt in FLOATS + ["i32", "i64", "u8", "bool"]:
            cdt = dt if is_float(dt) else DEFAULT_FLOAT
            cases = [("vec", (6,), "", 0), ("rows", (3, 5), "", -1), ("cols", (3, 5), "", 0),
                     ("mid", (2, 3, 4), "", 1), ("permuted", (5, 3), "permute:1,0", 1),
                     ("rank6", (2, 1, 2, 3, 1, 2), "", 3), ("empty", (0, 4), "", 1), ("long", (2, 100), "", 1),
                     ("large", (2, 5), "", 1), ("neg_inf", (2, 4), "", 1)]
            for name, shape, view, axis in cases:
                if dt in ("i64", "u8", "bool") and name not in ("rows", "permuted", "empty"):
                    continue
                if is_float(dt):
                    t = rand_t(dt, shape, -4, 4)
                    if name == "large":
                        t = T(dt, rnd(t.v * 10 + 1000.0 if dt != "f16" else t.v + 200, dt))
                    if name == "neg_inf":
                        t.v[:, 1] = -math.inf
                else:
                    t = rand_t(dt, shape, -5, 5)
                    if name == "neg_inf":
                        continue
                inp = In(t, view)
                x = conv(inp.value(), cdt)
                k = x.v.shape[axis] if x.v.ndim else 1
                r, lmax = softmax_rows(x.v, axis, cdt, op == "log_softmax")
                # each op rounds to the dtype; an exp at a rounding boundary moves a result by
                # an ulp or two; the reference sums in double (k * 2^-53 relative, which shows
                # in f64 results), other devices in f32 or better (k * 2^-24 relative)
                acc2 = EPS["f64"] if cdt == "f64" else EPS["f32"]
                if op == "softmax":
                    tol = numeric(ulps=3, rtol=k * EPS["f64"], ulps2=2, rtol2=2 * k * acc2)
                else:
                    tol = numeric(ulps=2, atol=2 * EPS[cdt] * max(lmax, 1.0) + k * EPS["f64"], ulps2=2,
                                  atol2=2 * k * acc2 * 4)
                w.add(op, f"{op}/{dt}/{name}", f"axis={axis}", [inp], T(cdt, r), tol)

    # layer_norm: (x - mean) / sqrt(var + eps), var with correction 0, computed exactly here.
    # The library composes elementary ops, each rounded to the dtype: mean, x - mean, var, + eps,
    # sqrt, / (and * w, + b). Error bound: a few eps of the dtype relative to the output, plus
    # eps * |mean| / std from x - mean; stated per case as rtol/atol.
    for dt in FLOATS:
        for name, shape, view, nr, affine, wshape in [
                ("rows", (4, 6), "", 1, False, None), ("last2", (2, 3, 4), "", 2, False, None),
                ("vec", (8,), "", 1, False, None), ("permuted", (6, 4), "permute:1,0", 1, False, None),
                ("empty", (0, 5), "", 1, False, None), ("rank6", (2, 1, 2, 1, 3, 4), "", 2, False, None),
                ("offset", (3, 16), "", 1, False, None),
                ("affine", (4, 6), "", 1, True, (6,)), ("affine_last2", (2, 3, 4), "", 2, True, (3, 4)),
                ("affine_bcast", (2, 3, 4), "", 2, True, (4,)), ("affine_view", (5, 3), "flip:0", 1, True, (3,))]:
            t = rand_t(dt, shape, -2, 3)
            if name == "offset":
                t = T(dt, rnd(t.v + 10.0, dt))
            eps = 1e-5
            inp = In(t, view)
            x = inp.value().v
            axes = tuple(range(x.ndim - nr, x.ndim))
            outer, rws, k = rows(x, list(axes))
            outs = []
            worst = 0.0
            for r in rws:
                fr = [Fraction(v) for v in r]
                m = sum(fr) / len(fr)
                var = sum((v - m) ** 2 for v in fr) / len(fr)
                sd = math.sqrt(float(var) + eps)
                outs.append([float((v - m) / Fraction(sd)) for v in fr])
                worst = max(worst, float(max(abs(v) for v in fr)) / sd)
            y = np.array(outs, dtype=np.float64).reshape(outer + tuple(x.shape[d] for d in axes)) \
                if outs else np.zeros(x.shape)
            e = EPS[dt]
            rtol, atol = 6 * e, 6 * e * (1 + worst)
            ins = [inp]
            op = "layer_norm"
            if affine:
                wt, bt = rand_t(dt, wshape, -2, 2), rand_t(dt, wshape, -1, 1)
                ins += [In(wt), In(bt)]
                y = y * wt.v + bt.v
                wmax = float(np.max(np.abs(wt.v))) if wt.v.size else 0.0
                bmax = float(np.max(np.abs(bt.v))) if bt.v.size else 0.0
                atol = atol * wmax + 4 * e * ((1 + worst) * wmax + bmax)
                op = "layer_norm_affine"
            w.add(op, f"{op}/{dt}/{name}", f"nr={nr};eps={hx(eps)}", ins, T(dt, rnd(y, dt)),
                  numeric(ulps=1, rtol=rtol, atol=atol, ulps2=1, rtol2=k * EPS["f32"] if dt != "f64" else 0))
    return w


# ---- matmul ----------------------------------------------------------------------------------

def matmul_ref(a, b, comp):
    """numpy.matmul semantics over exact values; floats exact then rounded once."""
    A, B = a.v, b.v
    a1, b1 = A.ndim == 1, B.ndim == 1
    A2 = A[None, :] if a1 else A
    B2 = B[:, None] if b1 else B
    batch = np.broadcast_shapes(A2.shape[:-2], B2.shape[:-2])
    A3 = np.broadcast_to(A2, batch + A2.shape[-2:])
    B3 = np.broadcast_to(B2, batch + B2.shape[-2:])
    M, K, N = A3.shape[-2], A3.shape[-1], B3.shape[-1]
    out = np.zeros(batch + (M, N), dtype=np.float64 if is_float(comp) else object)
    scale = 0.0
    for idx in np.ndindex(*batch) if batch else [()]:
        for i in range(M):
            for j in range(N):
                if is_float(comp):
                    terms = [Fraction(float(A3[idx + (i, k)])) * Fraction(float(B3[idx + (k, j)])) for k in range(K)]
                    out[idx + (i, j)] = round_exact(sum(terms, Fraction(0)), comp)
                    scale = max(scale, float(sum(abs(t) for t in terms)))
                else:
                    out[idx + (i, j)] = wrap(sum(int(A3[idx + (i, k)]) * int(B3[idx + (k, j)]) for k in range(K)), comp)
    if a1:
        out = out[..., 0, :]
    if b1:
        out = out[..., 0]
    return T(comp, out), K, scale


def gen_matmul():
    w = Writer("matmul")
    shapes = [("mm", (3, 4), "", (4, 5), ""), ("vv", (6,), "", (6,), ""), ("vm", (4,), "", (4, 5), ""),
              ("mv", (3, 4), "", (4,), ""), ("bmm", (2, 3, 4), "", (4, 5), ""),
              ("bcast", (2, 1, 3, 4), "", (3, 4, 2), ""), ("k0", (3, 0), "", (0, 4), ""),
              ("m0", (0, 4), "", (4, 2), ""), ("rank6", (2, 1, 1, 2, 3, 4), "", (1, 2, 1, 1, 4, 2), ""),
              ("views", (4, 3), "permute:1,0", (8, 5), "slice:0,0,10,2|flip:0"),
              ("expanded", (1, 3, 4), "expand:2,3,4", (4, 1), "expand:4,3"), ("long_k", (4, 64), "", (64, 3), ""),
              ("vbatch", (4,), "", (2, 4, 3), ""), ("batchv", (2, 3, 4), "", (4,), ""),
              ("one", (1, 1), "", (1, 1), "")]
    for dt in FLOATS + INTS:
        for name, sa, va, sb, vb in shapes:
            lo, hi = (-3, 3) if is_float(dt) else ((0, 6) if dt == "u8" else (-9, 9))
            ia, ib = In(rand_t(dt, sa, lo, hi), va), In(rand_t(dt, sb, lo, hi), vb)
            out, k, scale = matmul_ref(ia.value(), ib.value(), dt)
            w.add("matmul", f"matmul/{dt}/{name}", "", [ia, ib], out, mm_tol(dt, k, scale))
        if dt == "u8":  # products that wrap
            ia, ib = In(T(dt, [[200, 100], [255, 3]])), In(T(dt, [[200, 7], [5, 255]]))
            out, k, scale = matmul_ref(ia.value(), ib.value(), dt)
            w.add("matmul", f"matmul/{dt}/wrap", "", [ia, ib], out)
    for da, db in [("f16", "bf16"), ("i32", "f32"), ("u8", "i64"), ("f32", "f64"), ("bf16", "f32")]:
        comp = promote(da, db)
        ia, ib = In(rand_t(da, (2, 3), 0, 5)), In(rand_t(db, (3, 4), 0, 5))
        out, k, scale = matmul_ref(conv(ia.value(), comp), conv(ib.value(), comp), comp)
        w.add("matmul", f"matmul/{da}x{db}", "", [ia, ib], out, mm_tol(comp, k, scale))
    return w


def mm_tol(dt, k, scale):
    """Reference: double accumulation, one rounding: 1 ulp + k * 2^-53 of sum |a||b|. Others:
    accumulate in f32 or better: k * 2^-24 (f64: as the reference)."""
    if not is_float(dt):
        return EXACT
    acc2 = EPS["f64"] if dt == "f64" else EPS["f32"]
    return numeric(ulps=1, atol=2 * max(k, 1) * EPS["f64"] * scale, ulps2=1, atol2=2 * max(k, 1) * acc2 * scale)


# ---- movement ----------------------------------------------------------------------------------

def gen_movement():
    w = Writer("movement")
    for dt in DTYPES:
        def r(shape):
            return rand_t(dt, shape, -100, 100)

        def add(op, name, params, ins, out):
            w.add(op, f"{op}/{dt}/{name}", params, ins, T(dt, out))

        # reshape
        for name, shape, view, new in [("basic", (2, 3, 4), "", (4, -1)), ("vec", (6,), "", (2, 3)),
                                       ("to_scalar", (1,), "", ()), ("from_scalar", (), "", (1, 1)),
                                       ("empty", (2, 0, 3), "", (3, 0)), ("rank6", (2, 3, 4), "", (1, 2, 1, 3, 2, 2)),
                                       ("copy_permuted", (3, 4), "permute:1,0", (12,)),
                                       ("copy_sliced", (4, 6), "slice:1,0,6,2", (3, 4)),
                                       ("copy_flipped", (2, 3, 2), "flip:1", (-1, 2)),
                                       ("copy_expanded", (3, 1), "expand:3,4", (2, 6)),
                                       ("view_of_view", (4, 6), "slice:0,1,3,1", (3, -1, 2))]:
            inp = In(r(shape), view)
            add("reshape", name, f"shape={ints(new)}", [inp], inp.value().v.reshape(new))
        # permute / transpose
        for name, shape, view, perm in [("3d", (2, 3, 4), "", (2, 0, 1)), ("rank6", (2, 1, 3, 1, 2, 2), "", (5, 3, 1, 0, 2, 4)),
                                        ("scalar", (), "", ()), ("vec", (5,), "", (0,)), ("empty", (2, 0, 3), "", (1, 2, 0)),
                                        ("of_flip", (3, 4), "flip:0", (1, 0))]:
            inp = In(r(shape), view)
            add("permute", name, f"perm={ints(perm)}", [inp], np.transpose(inp.value().v, perm))
        for name, shape, view, ax in [("2d", (3, 4), "", (0, 1)), ("neg", (2, 3, 4), "", (-1, 0)),
                                      ("same", (2, 3), "", (1, 1)), ("of_slice", (4, 5), "slice:1,1,5,2", (0, 1))]:
            inp = In(r(shape), view)
            add("transpose", name, f"axes={ints(ax)}", [inp], np.swapaxes(inp.value().v, *ax))
        # expand
        for name, shape, view, new in [("col", (3, 1), "", (3, 4)), ("lead", (4,), "", (2, 3, 4)),
                                       ("minus1", (3, 1), "", (-1, 5)), ("scalar", (), "", (2, 3)),
                                       ("to_empty", (1, 3), "", (0, 3)), ("noop", (2, 3), "", (2, 3)),
                                       ("rank6", (3, 1, 1), "", (2, 1, 2, 3, 4, 2)),
                                       ("of_view", (3, 4), "slice:1,0,1,1", (2, 3, 5))]:
            inp = In(r(shape), view)
            x = inp.value().v
            tgt = list(new)
            off = len(tgt) - x.ndim
            for i in range(x.ndim):
                if tgt[off + i] == -1:
                    tgt[off + i] = x.shape[i]
            add("expand", name, f"shape={ints(new)}", [inp], np.broadcast_to(x, tgt))
        # slice
        M, N = INT64_MAX, INT64_MIN
        for name, shape, view, ax, a, b, s in [
                ("basic", (10,), "", 0, 2, 8, 2), ("neg_start", (10,), "", 0, -3, M, 1), ("neg_step", (10,), "", 0, 8, 2, -2),
                ("reverse", (10,), "", 0, M, N, -1), ("clamp", (10,), "", 0, -100, 100, 1), ("clamp_neg", (10,), "", 0, 100, -100, -3),
                ("empty_range", (10,), "", 0, 5, 2, 1), ("axis1", (4, 6), "", 1, 1, -1, 3), ("neg_axis", (4, 6), "", -2, -1, N, -2),
                ("empty_in", (0, 3), "", 1, 0, 2, 1), ("rank6", (2, 1, 3, 1, 2, 2), "", 2, 1, 3, 1),
                ("of_flip", (5, 4), "flip:0", 0, 1, 4, 2), ("big_step", (7,), "", 0, 0, M, 100)]:
            inp = In(r(shape), view)
            x = inp.value().v
            axn = ax % x.ndim
            add("slice", name, f"axis={ax};start={a};stop={b};step={s}", [inp],
                x[(slice(None),) * axn + (slice(a, b, s),)])
        # flip
        for name, shape, view, axes in [("two", (2, 3, 4), "", (0, 2)), ("all", (2, 3), "", ()), ("neg", (3, 4), "", (-1,)),
                                        ("scalar", (), "", ()), ("empty", (0, 3), "", (0, 1)),
                                        ("twice", (3, 4), "flip:1", (1,)), ("rank6", (2, 1, 3, 1, 2, 2), "", (0, 2, 5))]:
            inp = In(r(shape), view)
            x = inp.value().v
            add("flip", name, f"axes={ints(axes)}", [inp], np.flip(x, axis=tuple(axes)) if axes else np.flip(x))
        # squeeze / unsqueeze
        for name, shape, view, axes in [("all", (1, 3, 1, 2), "", ()), ("one", (1, 3, 1, 2), "", (0,)),
                                        ("neg", (1, 3, 1, 2), "", (-2,)), ("to_scalar", (1,), "", ()),
                                        ("none", (3,), "", ()), ("empty", (1, 0, 1), "", (2,)),
                                        ("of_view", (4, 1), "permute:1,0", (0,))]:
            inp = In(r(shape), view)
            x = inp.value().v
            add("squeeze", name, f"axes={ints(axes)}", [inp], np.squeeze(x, axis=tuple(axes)) if axes else np.squeeze(x))
        for name, shape, view, ax in [("front", (2, 3), "", 0), ("mid", (2, 3), "", 1), ("end", (2, 3), "", 2),
                                      ("neg1", (2, 3), "", -1), ("neg3", (2, 3), "", -3), ("scalar", (), "", 0),
                                      ("of_view", (3, 4), "transpose:0,1", 1)]:
            inp = In(r(shape), view)
            add("unsqueeze", name, f"axis={ax}", [inp], np.expand_dims(inp.value().v, ax))
        # contiguous
        for name, shape, view in [("dense", (3, 4), ""), ("permuted", (2, 3, 4), "permute:2,0,1"),
                                  ("sliced", (6, 5), "slice:1,4,0,-2"), ("flipped", (3, 4), "flip:0,1"),
                                  ("expanded", (3, 1), "expand:2,3,4"), ("scalar", (), ""), ("empty", (0, 4), "transpose:0,1"),
                                  ("rank6", (2, 1, 3, 1, 2, 2), "permute:5,4,3,2,1,0")]:
            inp = In(r(shape), view)
            add("contiguous", name, "", [inp], inp.value().v)
        # cat / stack
        for name, shapes, views, ax in [("axis0", [(2, 3), (1, 3), (3, 3)], ["", "", ""], 0),
                                        ("axis1", [(2, 3), (2, 1)], ["", ""], 1),
                                        ("neg", [(2, 2, 2), (2, 2, 3)], ["", ""], -1),
                                        ("one", [(4,)], [""], 0),
                                        ("with_empty", [(2, 3), (0, 3), (1, 3)], ["", "", ""], 0),
                                        ("views", [(3, 2), (2, 4)], ["permute:1,0", "slice:1,-1,N,-1|flip:0"], 1),
                                        ("expanded", [(1, 3), (2, 3)], ["expand:2,3", ""], 0)]:
            ins = [In(r(s), v.replace("N", str(INT64_MIN))) for s, v in zip(shapes, views)]
            add("cat", name, f"axis={ax}", ins, np.concatenate([i.value().v for i in ins], axis=ax))
        for name, shapes, views, ax in [("axis0", [(2, 3)] * 3, ["", "", ""], 0), ("axis1", [(2, 3)] * 2, ["", ""], 1),
                                        ("end", [(2, 3)] * 2, ["", ""], 2), ("neg", [(2, 3)] * 2, ["", ""], -1),
                                        ("scalars", [()] * 3, ["", "", ""], 0), ("one", [(4,)], [""], 0),
                                        ("empty", [(0, 2)] * 2, ["", ""], 1),
                                        ("views", [(3, 2), (2, 3)], ["permute:1,0", "flip:1"], 0)]:
            ins = [In(r(s), v) for s, v in zip(shapes, views)]
            add("stack", name, f"axis={ax}", ins, np.stack([i.value().v for i in ins], axis=ax))
        # pad
        pad_vals = {"float": 0.5, "int": 7.9, "bool": 2.0}
        for name, shape, view, pads, value in [
                ("basic", (3, 4), "", (1, 2, 0, 1), None), ("crop", (4, 5), "", (-1, 0, 1, -2), None),
                ("vec", (3,), "", (2, 0), None), ("scalar", (), "", (), None), ("to_empty", (3, 2), "", (-1, -2, 0, 0), None),
                ("from_empty", (0, 2), "", (1, 1, 0, 0), None), ("view", (3, 4), "permute:1,0", (0, 1, 2, 0), None),
                ("neg_value", (2, 2), "", (1, 1, 1, 1), -1.0), ("rank6", (1, 2, 1, 2, 1, 2), "", (0, 1) * 6, None)]:
            if value is None:
                value = pad_vals["float" if is_float(dt) else ("bool" if dt == "bool" else "int")]
            inp = In(r(shape), view)
            x = inp.value().v
            crop = tuple(slice(max(0, -pads[2 * d]), x.shape[d] - max(0, -pads[2 * d + 1])) for d in range(x.ndim))
            xc = x[crop]
            pw = [(max(0, pads[2 * d]), max(0, pads[2 * d + 1])) for d in range(x.ndim)]
            out = np.pad(xc, pw, constant_values=scalar_to(value, dt)) if x.ndim else xc
            add("pad", name, f"pads={ints(pads)};value={hx(value)}", [inp], out)
    for dts in [("f16", "bf16"), ("i32", "f32"), ("u8", "bool"), ("i64", "f64"), ("u8", "i32", "f16"), ("bool", "i64"),
                ("bf16", "f64", "f32")]:
        comp = dts[0]
        for d in dts[1:]:
            comp = promote(comp, d)
        ins = [In(rand_t(d, (2, k + 1), -100, 100)) for k, d in enumerate(dts)]
        out = np.concatenate([conv(i.value(), comp).v for i in ins], axis=1)
        w.add("cat", f"cat/{'+'.join(dts)}", "axis=1", ins, T(comp, out))
    return w


# ---- index ops ---------------------------------------------------------------------------------

def add_rounded(a, b, dt):
    """a + b in dt: one rounding for floats, wrapping for integers."""
    if is_float(dt):
        return round_bits(float(f64(a) + f64(b)), dt)
    return wrap(int(a) + int(b), dt)


ROUNDING_ORDER_SEEN = set()


def gen_index():
    w = Writer("index")
    for dt in DTYPES:
        def r(shape):
            return rand_t(dt, shape, -50, 50)

        # index_select: negative indices count from the end
        for name, shape, view, ax, idx, idt in [("rows", (5, 3), "", 0, [4, 0, 0, -1, 2], "i64"),
                                                ("cols_i32", (5, 3), "", 1, [2, -3], "i32"),
                                                ("empty_idx", (5, 3), "", 0, [], "i64"), ("vec", (6,), "", 0, [5, 1, 1], "i64"),
                                                ("neg_axis", (2, 3, 4), "", -1, [3, 0, -2], "i32"),
                                                ("view", (4, 5), "permute:1,0|flip:1", 0, [1, 4, 0], "i64")]:
            inp = In(r(shape), view)
            x = inp.value().v
            it = T(idt, idx)
            out = np.take(x, np.array(idx, dtype=np.int64) % x.shape[ax], axis=ax) if idx else \
                np.take(x, np.array([], dtype=np.int64), axis=ax)
            w.add("index_select", f"index_select/{dt}/{name}", f"axis={ax}", [inp, In(it)], T(dt, out))
        # gather
        for name, shape, view, ax, ishape, idt in [("axis1", (3, 4), "", 1, (3, 2), "i64"), ("axis0", (3, 4), "", 0, (2, 4), "i64"),
                                                   ("smaller", (3, 4), "", 1, (2, 2), "i32"), ("3d", (2, 3, 4), "", -1, (2, 3, 5), "i64"),
                                                   ("empty", (3, 4), "", 0, (0, 4), "i64"),
                                                   ("view", (4, 3), "transpose:0,1", 1, (3, 3), "i64")]:
            inp = In(r(shape), view)
            x = inp.value().v
            axn = ax % x.ndim
            iv = rng.integers(0, x.shape[axn], ishape)
            out = np.empty(ishape, dtype=x.dtype)
            for pos in np.ndindex(*ishape):
                src = list(pos)
                src[axn] = iv[pos]
                out[pos] = x[tuple(src)]
            w.add("gather", f"gather/{dt}/{name}", f"axis={ax}", [inp, In(T(idt, iv))], T(dt, out))
        if dt == "bool":
            continue  # scatter_add / index_add are arithmetic
        # scatter_add: out[idx[i][j]][j] += src[i][j] for axis 0, in index order, each addition rounded
        for name, xs, ax, ish, idt, view in [("axis0", (3, 4), 0, (5, 4), "i64", ""), ("axis1", (3, 4), 1, (3, 6), "i64", ""),
                                             ("smaller", (4, 5), 1, (2, 3), "i32", ""), ("3d", (2, 3, 4), -2, (2, 5, 4), "i64", ""),
                                             ("dups", (3, 4), 0, (6, 4), "i64", ""),
                                             ("empty", (3, 4), 0, (0, 4), "i64", ""), ("x_view", (4, 3), 0, (4, 4), "i64", "permute:1,0")]:
            inp = In(r(xs) if not is_float(dt) else rand_t(dt, xs, -2, 2), view)
            x = inp.value().v.copy()
            axn = ax % x.ndim
            iv = rng.integers(0, x.shape[axn], ish)
            if iv.size:
                iv.flat[0] = iv.flat[-1]  # at least one duplicate
            src = rand_t(dt, ish, -2, 2) if is_float(dt) else rand_t(dt, ish, 0 if dt == "u8" else -50, 100)
            if name == "dups":  # every row into row 1, where the ulp is 1/2: each rounded addition counts
                iv[:] = 1
                if is_float(dt):
                    inp.t.v[1] = {"f16": 512.0, "bf16": 64.0}.get(dt, 1.0)
                    x = inp.value().v.copy()
                    src = rand_t(dt, ish, 0.1, 0.9)
            out = x.astype(object)
            once = x.astype(object)
            for pos in np.ndindex(*ish):
                d = list(pos)
                d[axn] = iv[pos]
                out[tuple(d)] = add_rounded(out[tuple(d)], src.v[pos], dt)
                once[tuple(d)] = once[tuple(d)] + src.v[pos]
            if dt in ("f16", "bf16") and name != "empty":
                ROUNDING_ORDER_SEEN.add(("scatter_add", dt, bool(np.any(rnd(np.array(once, dtype=np.float64), dt) !=
                                                                     np.array(out, dtype=np.float64)))))
            w.add("scatter_add", f"scatter_add/{dt}/{name}", f"axis={ax}", [inp, In(T(idt, iv)), In(src)], T(dt, out))
        # index_add: slice idx[i] along axis gets src's slice i added (in order, each rounded)
        for name, xs, ax, idx, idt, view in [("rows", (5, 3), 0, [1, 3, 1, 4], "i64", ""), ("cols", (3, 4), 1, [0, 0, 2], "i32", ""),
                                             ("dups", (3, 4), 0, [2, 2, 2, 2, 2, 2], "i64", ""),
                                             ("empty", (3, 4), 0, [], "i64", ""), ("3d", (2, 3, 4), -1, [3, 1, 3], "i64", ""),
                                             ("x_view", (4, 5), 0, [2, 2, 0], "i64", "transpose:0,1")]:
            inp = In(r(xs) if not is_float(dt) else rand_t(dt, xs, -2, 2), view)
            x = inp.value().v.copy()
            axn = ax % x.ndim
            sshape = list(x.shape)
            sshape[axn] = len(idx)
            src = rand_t(dt, sshape, -2, 2) if is_float(dt) else rand_t(dt, sshape, 0 if dt == "u8" else -50, 100)
            if name == "dups" and is_float(dt):  # where the ulp is 1/2, each rounded addition counts
                inp.t.v[2] = {"f16": 512.0, "bf16": 64.0}.get(dt, 1.0)
                x = inp.value().v.copy()
                src = rand_t(dt, sshape, 0.1, 0.9)
            out = x.astype(object)
            once = x.astype(object)
            for i, k in enumerate(idx):
                for pos in np.ndindex(*[s for d, s in enumerate(sshape) if d != axn]):
                    p = list(pos)
                    ps = tuple(p[:axn] + [i] + p[axn:])
                    po = tuple(p[:axn] + [k] + p[axn:])
                    out[po] = add_rounded(out[po], src.v[ps], dt)
                    once[po] = once[po] + src.v[ps]
            if dt in ("f16", "bf16") and idx:
                ROUNDING_ORDER_SEEN.add(("index_add", dt, bool(np.any(rnd(np.array(once, dtype=np.float64), dt) !=
                                                                   np.array(out, dtype=np.float64)))))
            w.add("index_add", f"index_add/{dt}/{name}", f"axis={ax}", [inp, In(T(idt, idx)), In(src)], T(dt, out))
    for op in ("scatter_add", "index_add"):
        for dt in ("f16", "bf16"):
            assert (op, dt, True) in ROUNDING_ORDER_SEEN, f"{op}/{dt}: no case where rounding each addition matters"
    # slice_assign: value broadcast to the slice and converted to x's dtype
    for dt in DTYPES:
        for name, xs, view, ax, a, b, s, vdt, vshape in [
                ("rows", (6, 4), "", 0, 1, 5, 2, dt, (2, 4)), ("bcast_row", (6, 4), "", 0, 0, 6, 1, dt, (1, 4)),
                ("scalar_value", (6, 4), "", 1, -3, INT64_MAX, 1, dt, ()), ("neg_step", (6, 4), "", 0, 5, INT64_MIN, -2, dt, (3, 1)),
                ("empty_slice", (6, 4), "", 1, 2, 2, 1, dt, (6, 0)), ("convert_f64", (5, 3), "", 1, 0, 2, 1, "f64", (5, 2)),
                ("convert_i32", (5, 3), "", 0, -2, INT64_MAX, 1, "i32", (2, 3)), ("x_view", (4, 6), "permute:1,0", 0, 1, 3, 1, dt, (2, 4)),
                ("rank6", (2, 1, 3, 1, 2, 2), "", 2, 0, 3, 2, dt, (1, 1, 2, 1, 1, 2))]:
            inp = In(rand_t(dt, xs, -50, 50), view)
            x = inp.value()
            vt = rand_t(vdt, vshape, -300, 300)
            axn = ax % x.v.ndim
            out = x.v.copy()
            sl = (slice(None),) * axn + (slice(a, b, s),)
            cv = conv(vt, dt).v
            out[sl] = np.broadcast_to(cv, out[sl].shape)
            w.add("slice_assign", f"slice_assign/{dt}/{name}<-{vdt}", f"axis={ax};start={a};stop={b};step={s}",
                  [inp, In(vt)], T(dt, out))
    return w


# ---- creation and random ---------------------------------------------------------------------

MASK32 = 0xFFFFFFFF


def philox(ctr, key):
    c = list(ctr)
    k0, k1 = key
    for rnd_ in range(10):
        if rnd_:
            k0 = (k0 + 0x9E3779B9) & MASK32
            k1 = (k1 + 0xBB67AE85) & MASK32
        p0 = 0xD2511F53 * c[0]
        p1 = 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k0, p1 & MASK32, (p0 >> 32) ^ c[3] ^ k1, p0 & MASK32]
    return c


def philox64(counter, key):
    return philox([counter & MASK32, (counter >> 32) & MASK32, 0, 0], [key & MASK32, key >> 32])


def rand_value(seed, n, dt, normal):
    w0, w1, w2, w3 = philox64(n, seed)
    if not normal:
        if dt == "f64":
            return math.ldexp(((w1 << 32) | w0) >> 11, -53)
        if dt == "f16":
            return math.ldexp(w0 >> 21, -11)
        if dt == "bf16":
            return math.ldexp(w0 >> 24, -8)
        return math.ldexp(w0 >> 8, -24)
    if dt == "f64":
        u1 = math.ldexp((((w1 << 32) | w0) >> 11) + 1, -53)
        u2 = math.ldexp(((w3 << 32) | w2) >> 11, -53)
    else:
        u1 = math.ldexp((w0 >> 8) + 1, -24)
        u2 = math.ldexp(w2 >> 8, -24)
    return round_bits(math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2), dt)


def gen_creation():
    w = Writer("creation")
    shapes = [(), (0,), (2, 3), (2, 1, 3, 1, 2, 2), (3, 0, 2)]
    for dt in DTYPES:
        for shp in shapes:
            p = f"dtype={DT_CODE[dt]};shape={ints(shp)};rank={len(shp)}"
            w.add("zeros", f"zeros/{dt}/{shp}", p, [], T(dt, np.zeros(shp)))
            w.add("ones", f"ones/{dt}/{shp}", p, [], T(dt, np.ones(shp)))
        vals = [0.1, -2.7, 300.0, -5.0, 1e10, 0.5, 0.0, -0.0, 65520.0, 1e-40]
        if is_float(dt):
            vals += [math.nan, math.inf, -math.inf]
        for v in vals:
            shp = (2, 3) if v != 0.1 else ()
            w.add("full", f"full/{dt}/{v!r}", f"dtype={DT_CODE[dt]};shape={ints(shp)};rank={len(shp)};value={hx(v)}", [],
                  T(dt, np.full(shp, scalar_to(v, dt), dtype=np.float64 if is_float(dt) else object)))
        for n, m in [(3, 3), (2, 4), (4, 2), (0, 3), (1, 1), (3, 0)]:
            w.add("eye", f"eye/{dt}/{n}x{m}", f"dtype={DT_CODE[dt]};n={n};m={m}", [], T(dt, np.eye(n, m)))
    # arange: element i = start + i*step in double, then converted; numpy's length
    cases = [(0, 10, 1, 0), (0, 1, 0.1, 0), (10, 0, -3, 0), (5, 5, 1, 0), (0.5, 5, 1, DT_CODE["i32"]),
             (0, 300, 50, DT_CODE["u8"]), (0, 2, 0.3, DT_CODE["f16"]), (-1, 1, 0.25, DT_CODE["bf16"]),
             (1, 2, 0.1, DT_CODE["f64"]), (-3, 3, 1, DT_CODE["f32"]), (0, 0.3, 0.1, DT_CODE["f64"]),
             (3, -2.5, -0.5, DT_CODE["i64"]), (0, 5, 2, DT_CODE["bf16"]), (-2.5, 2.5, 0.7, 0)]
    inv = {v: k for k, v in DT_CODE.items()}
    for start, stop, step, dcode in cases:
        n = int(np.arange(start, stop, step).size)
        n2 = 0
        while (start + n2 * step < stop) if step > 0 else (start + n2 * step > stop):
            n2 += 1
        assert n == n2, (start, stop, step)
        if dcode == 0:
            dt = "i64" if all(float(v).is_integer() for v in (start, stop, step)) else DEFAULT_FLOAT
        else:
            dt = inv[dcode]
        vals = [float(f64(start) + f64(i) * f64(step)) for i in range(n)]
        out = T(dt, [scalar_to(v, dt) for v in vals]) if n else T(dt, np.zeros((0,)))
        w.add("arange", f"arange/{dt}/{start},{stop},{step}", f"dtype={dcode};start={hx(start)};stop={hx(stop)};step={hx(step)}",
              [], out)
    # rand / randn: seed via burnc_device_seed; `pre` elements are drawn first (a second draw
    # starts at counter pre). Uniform values are exact; normal ones are one Box-Muller in double
    # rounded once: 1 ulp for narrow dtypes (f64: 4 ulps of libm differences, plus 1e-15 near the
    # zeros of cos).
    for op in ["rand", "randn"]:
        for dt in FLOATS:
            for seed, pre, shp in [(0, 0, (5,)), (42, 0, (3, 4)), (42, 12, (3, 4)), ((1 << 40) + 12345, 0, (2, 3, 1, 2)),
                                   ((1 << 64) - 1, 0, ()), ((1 << 64) - 1, 1, (0, 3)), (7, 0, (0,)), (7, 3, (64,)),
                                   (0xDEADBEEF12345678, 100, (6,))]:
                n = int(np.prod(shp, dtype=np.int64))
                vals = [rand_value(seed, pre + i, dt, op == "randn") for i in range(n)]
                tol = EXACT if op == "rand" else numeric(ulps=4 if dt == "f64" else 1, atol=1e-15 if dt == "f64" else 0,
                                                         ulps2=2)
                w.add(op, f"{op}/{dt}/seed={seed}/pre={pre}/{shp}",
                      f"dtype={DT_CODE[dt]};shape={ints(shp)};rank={len(shp)};seed={seed};pre={pre}", [],
                      T(dt, np.array(vals).reshape(shp)), tol)
    return w


# ---- self checks -------------------------------------------------------------------------------

def self_check():
    # Philox 4x32-10 known answers (Random123 kat_vectors)
    assert philox([0, 0, 0, 0], [0, 0]) == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    assert philox([MASK32] * 4, [MASK32] * 2) == [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]
    assert philox([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0]) == \
        [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]
    # round_bits (bit operations) against round_exact (rational arithmetic) and numpy's f32
    r = np.random.default_rng(1)
    xs = list(r.normal(0, 1, 3000) * np.exp2(r.integers(-160, 160, 3000)))
    for dt in ["f16", "bf16", "f32"]:
        p = FMT[dt][0]
        for k in range(-150, 140, 7):  # exact ties, and ties +- one f64 ulp
            for m in (1, 3, 5, 255):
                t = math.ldexp(1.0 + m * 2.0 ** -p, k) if m < 255 else math.ldexp(1 + 2.0 ** -p, k)
                xs += [t, math.nextafter(t, 0), math.nextafter(t, math.inf), -t]
        xs += [max_finite(dt) * (1 + 2.0 ** -(p + 1)), math.nextafter(max_finite(dt) * (1 + 2.0 ** -(p + 1)), 0),
               min_subnormal(dt) / 2, math.nextafter(min_subnormal(dt) / 2, 1), 1.5 * min_subnormal(dt)]
    for dt in ["f16", "bf16", "f32"]:
        for x in xs:
            a, b = round_bits(x, dt), round_exact(x, dt)
            assert a == b and math.copysign(1, a) == math.copysign(1, b), (dt, x, a, b)
            if dt == "f32":
                c = float(np.float32(x))
                assert c == a, (x, a, c)
    # the integer path of round_exact (i64 -> f32 must not round twice through f64)
    assert round_exact((1 << 60) + (1 << 36) + 1, "f32") == float((1 << 60) + (1 << 37))
    assert round_exact(2049, "f16") == 2048.0 and round_exact(2051, "f16") == 2052.0
    assert round_exact(65520, "f16") == math.inf and round_exact(65519, "f16") == 65504.0


def main():
    global OUT_DIR, rng
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=SEED, help="random inputs seed (default: the committed data's)")
    ap.add_argument("--out", default=HERE, help="output directory (default: tests/data)")
    args = ap.parse_args()
    OUT_DIR = args.out
    rng = np.random.default_rng(args.seed)
    self_check()
    total = 0
    summary = []
    for gen in [gen_unary, gen_binary, gen_scalar, gen_where_clamp, gen_cast, gen_reduce, gen_nn, gen_matmul,
                gen_movement, gen_index, gen_creation]:
        w = gen()
        size = w.write()
        total += size
        summary.append((w.name, len(w.cases), size))
    for name, n, size in summary:
        print(f"{name:10s} {n:6d} cases {size:9d} bytes")
    print(f"total {sum(n for _, n, _ in summary)} cases, {total} bytes")
    if total >= 2 * 1024 * 1024:
        sys.exit("golden data exceeds 2 MB")


if __name__ == "__main__":
    main()
