#!/usr/bin/python3
"""Writes the golden vectors of tests/test_dtype.c into this directory.

    /usr/bin/python3 tests/data/gen_dtype.py

Every file is text: '#' starts a comment line, fields are separated by one space.
  dtype_f16.txt          f64-bits f16-bits     numpy astype(float16) from float64 (one rounding)
  dtype_bf16.txt         f64-bits bf16-bits    correctly rounded from the float64 bits here
  dtype_remainder_f64.txt a-bits b-bits r-bits numpy.remainder on float64
  dtype_int_ops.txt      dtype op a b result   numpy floor_divide / remainder / power
Bits are hexadecimal without 0x, integers decimal. Each rounding result is checked against a
second, independent method before it is written, so a golden value is never one method's word.
The output is deterministic (fixed seed).
"""
import bisect
import os
import struct
from fractions import Fraction

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
RNG = np.random.default_rng(20240607)


def f64_bits(x):
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def f64_from_bits(u):
    return struct.unpack("<d", struct.pack("<Q", u))[0]


def next_up(x):
    return float(np.nextafter(x, np.inf))


def next_down(x):
    return float(np.nextafter(x, -np.inf))


class Fmt:
    """A binary floating-point format of 16 bits: 1 sign, `exp_bits`, `mant` fraction bits."""

    def __init__(self, name, exp_bits, mant):
        self.name, self.exp_bits, self.mant = name, exp_bits, mant
        self.bias = (1 << (exp_bits - 1)) - 1
        self.emin = 1 - self.bias
        self.inf = ((1 << exp_bits) - 1) << mant
        self.sign = 1 << 15

    def decode(self, h):
        """Exact value of a finite pattern, as a Fraction."""
        e = (h >> self.mant) & ((1 << self.exp_bits) - 1)
        f = h & ((1 << self.mant) - 1)
        if e == 0:
            v = Fraction(f) * Fraction(2) ** (self.emin - self.mant)
        else:
            v = Fraction((1 << self.mant) | f) * Fraction(2) ** (e - self.bias - self.mant)
        return -v if h & self.sign else v

    def round_bits(self, x):
        """Round-to-nearest-even from the float64's exact value, with integer arithmetic."""
        if np.isnan(x):
            return None
        sign = self.sign if f64_bits(x) >> 63 else 0
        if np.isinf(x):
            return sign | self.inf
        if x == 0:
            return sign
        num, den = abs(x).as_integer_ratio()  # den is a power of two
        e = num.bit_length() - den.bit_length()  # floor(log2 |x|)
        q = max(e, self.emin) - self.mant  # the spacing of the result is 2^q
        if q >= 0:
            den <<= q
        else:
            num <<= -q
        k, r = divmod(num, den)
        if 2 * r > den or (2 * r == den and k & 1):
            k += 1
        if k < (1 << self.mant):
            bits = k  # subnormal: exponent field 0
        else:
            # k in [2^mant, 2^(mant+1)]; the top value carries into the next binade.
            bits = ((q + self.mant + self.bias) << self.mant) + k - (1 << self.mant)
        return sign | min(bits, self.inf)


def nearest_table(fmt):
    """All finite non-negative values sorted, plus 2^(emax+1) standing for infinity (IEEE
    overflow: what rounds to at least that, with unbounded exponent, is inf)."""
    pats = list(range(0, fmt.inf))
    vals = [fmt.decode(h) for h in pats]
    vals.append(Fraction(2) ** (fmt.bias + 1))
    pats.append(fmt.inf)
    return vals, pats


def round_by_table(fmt, table, x):
    """The second method: bracket |x| between neighbours in the table, pick the nearer one,
    the even pattern on a tie."""
    if np.isnan(x):
        return None
    sign = fmt.sign if f64_bits(x) >> 63 else 0
    if np.isinf(x):
        return sign | fmt.inf
    vals, pats = table
    v = abs(Fraction(x))
    i = bisect.bisect_right(vals, v) - 1
    if i >= len(vals) - 1:
        return sign | fmt.inf
    lo, hi = vals[i], vals[i + 1]
    dl, dh = v - lo, hi - v
    if dl < dh or (dl == dh and pats[i] % 2 == 0):
        return sign | pats[i]
    return sign | pats[i + 1]


def boundary_values(fmt, exponent_fields, mantissas):
    """Around chosen representable values: the value, its double neighbours, the midpoint to
    the next value and the midpoint's double neighbours (those catch double rounding)."""
    out = []
    for ef in exponent_fields:
        for m in mantissas:
            h = (ef << fmt.mant) | m
            v = float(fmt.decode(h))
            nxt = float(fmt.decode(h + 1)) if h + 1 < fmt.inf else float(2.0 ** (fmt.bias + 1))
            mid = (v + nxt) / 2  # exact in double: narrow values have few bits
            out += [v, next_up(v), next_down(v), mid, next_up(mid), next_down(mid)]
    return out


def random_doubles(n, emin, emax):
    exps = RNG.integers(emin, emax + 1, size=n)
    fracs = RNG.integers(0, 1 << 52, size=n, dtype=np.uint64)
    signs = RNG.integers(0, 2, size=n)
    out = []
    for e, f, s in zip(exps, fracs, signs):
        bits = (int(s) << 63) | ((int(e) + 1023) << 52) | int(f)
        out.append(f64_from_bits(bits))
    return out


SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 5e-324, -5e-324, 2.2250738585072014e-308,
            1e-300, 1.7976931348623157e308, -1.7976931348623157e308, 1.0, -1.0, 0.5, 1e5, -1e5,
            1 + 2.0**-11 + 2.0**-40, 1 + 2.0**-8 + 2.0**-40]


def unique(xs):
    seen, out = set(), []
    for x in xs:
        b = f64_bits(x)
        if b not in seen:
            seen.add(b)
            out.append(x)
    return out


def write_lines(name, header, lines):
    with open(os.path.join(HERE, name), "w") as f:
        f.write("# generated by gen_dtype.py; do not edit\n")
        for h in header:
            f.write("# " + h + "\n")
        f.write("\n".join(lines) + "\n")


def numpy_f16_bits(x):
    with np.errstate(over="ignore"):  # overflow to inf is the point of some inputs
        return int(np.array([x], dtype=np.float64).astype(np.float16).view(np.uint16)[0])


def struct_f16_bits(x):
    """Python's own binary16 packing (correctly rounded from double); None on overflow."""
    try:
        return struct.unpack("<H", struct.pack("<e", x))[0]
    except OverflowError:
        return None


def gen_f16():
    fmt = Fmt("f16", 5, 10)
    table = nearest_table(fmt)
    xs = boundary_values(fmt, range(0, 31), [0, 1, 2, 511, 1022, 1023])
    xs += [65504.0, 65519.99999999999, 65520.0, 65536.0, 2.0**-24, 2.0**-25, 3 * 2.0**-25, 2.0**-26]
    xs += SPECIALS + random_doubles(400, -27, 17)
    xs = unique(xs + [-x for x in xs])
    lines = []
    for x in xs:
        got = numpy_f16_bits(x)
        if np.isnan(x):
            assert (got & 0x7c00) == 0x7c00 and (got & 0x3ff) != 0
            lines.append("%016x %04x" % (f64_bits(x), got))
            continue
        want = round_by_table(fmt, table, x)
        assert got == want == fmt.round_bits(x), (x, hex(got), hex(want))
        packed = struct_f16_bits(x)
        assert packed is None or packed == got, (x, packed, got)
        lines.append("%016x %04x" % (f64_bits(x), got))
    write_lines("dtype_f16.txt", ["f64 bits -> numpy float16 bits (astype from float64)"], lines)


def gen_bf16():
    fmt = Fmt("bf16", 8, 7)
    table = nearest_table(fmt)
    fields = list(range(0, 4)) + list(range(60, 68)) + list(range(120, 136)) + list(range(250, 255))
    xs = boundary_values(fmt, fields, [0, 1, 2, 63, 126, 127])
    xs += [2.0**-133, 2.0**-134, 3 * 2.0**-134, 2.0**-135, 3.3895313892515355e38]
    xs += SPECIALS + random_doubles(400, -136, 128)
    xs = unique(xs + [-x for x in xs])
    lines = []
    for x in xs:
        got = fmt.round_bits(x)
        if got is None:
            got = (fmt.sign if f64_bits(x) >> 63 else 0) | 0x7fc0
        else:
            assert got == round_by_table(fmt, table, x), (x, hex(got))
        lines.append("%016x %04x" % (f64_bits(x), got))
    write_lines("dtype_bf16.txt", ["f64 bits -> bfloat16 bits, round to nearest even, once"], lines)


def gen_remainder():
    vals = [0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 3.0, -3.0, 0.1, -0.1, 5.0, -5.0, 1e300, -1e300,
            1e-300, -1e-300, 5e-324, -5e-324, 7.5e15, -9007199254740993.0, np.inf, -np.inf, np.nan]
    pairs = [(a, b) for a in vals for b in vals]
    r = random_doubles(300, -8, 8)
    pairs += list(zip(r[:150], r[150:]))
    a = np.array([p[0] for p in pairs])
    b = np.array([p[1] for p in pairs])
    with np.errstate(all="ignore"):
        out = np.remainder(a, b)
    lines = ["%016x %016x %016x" % (f64_bits(x), f64_bits(y), f64_bits(float(z)))
             for x, y, z in zip(a, b, out)]
    write_lines("dtype_remainder_f64.txt", ["a b -> numpy.remainder(a, b), float64 bits"], lines)


INT_VALUES = {
    "i32": (np.int32, [-2**31, -2**31 + 1, -1000, -7, -3, -2, -1, 0, 1, 2, 3, 7, 1000,
                       2**31 - 2, 2**31 - 1, -123457, 98765]),
    "i64": (np.int64, [-2**63, -2**63 + 1, -2**40 - 3, -7, -3, -2, -1, 0, 1, 2, 3, 7, 2**40 + 5,
                       2**63 - 2, 2**63 - 1, -123456789012, 98765]),
    "u8": (np.uint8, [0, 1, 2, 3, 7, 100, 127, 128, 200, 254, 255]),
}
POW_EXPONENTS = [0, 1, 2, 3, 5, 7, 8, 31, 32, 63, 64]


def gen_int_ops():
    lines = []
    for name, (dt, vals) in INT_VALUES.items():
        a = np.array([x for x in vals for _ in vals], dtype=dt)
        b = np.array([y for _ in vals for y in vals], dtype=dt)
        with np.errstate(all="ignore"):
            ops = {"div": np.floor_divide(a, b), "remainder": np.remainder(a, b)}
        for op, res in ops.items():
            lines += ["%s %s %d %d %d" % (name, op, x, y, z) for x, y, z in zip(a, b, res)]
        base = np.array([x for x in vals for _ in POW_EXPONENTS], dtype=dt)
        exps = np.array([e for _ in vals for e in POW_EXPONENTS], dtype=dt)
        with np.errstate(all="ignore"):
            res = np.power(base, exps)
        lines += ["%s pow %d %d %d" % (name, x, y, z) for x, y, z in zip(base, exps, res)]
    write_lines("dtype_int_ops.txt", ["dtype op a b -> numpy floor_divide / remainder / power "
                                      "(results wrapped to the dtype)"], lines)


def main():
    gen_f16()
    gen_bf16()
    gen_remainder()
    gen_int_ops()


if __name__ == "__main__":
    main()
