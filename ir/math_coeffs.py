#!/usr/bin/env python3
"""Derives the polynomial coefficients and split constants of ir/math.c.

Each approximation is a weighted minimax fit found by the Remez exchange algorithm on a dense
grid, computed with Python's decimal module at 80 digits (no numpy, no mpmath): the functions
are evaluated from their Taylor series (or decimal's exp/ln), so the fit is limited only by
the degree. Coefficients are then rounded to the target type (f32 or f64) and the weighted
error of the rounded polynomial is reported, so a degree can be chosen against the target
precision.

    python3 ir/math_coeffs.py            # prints every table as C initializers (~1 minute)
    python3 ir/math_coeffs.py exp_f64    # one fit, with its error

The printed tables are pasted into ir/math.c under the same names (C double arrays; the f32
tables hold binary32 values, which kir_const_f rounds exactly). `constants` prints the split
constants (pi/2, ln2, log2(e), ...) that ir/math.c spells out in its macros.
"""
import struct
import sys
from decimal import Decimal as D, getcontext

getcontext().prec = 80

PI = D("3.14159265358979323846264338327950288419716939937510582097494459230781640628620899863")
LN2 = D(2).ln()
SQRTPI = PI.sqrt()


def f32(v):
    """v rounded to the nearest binary32, as a Python float."""
    return struct.unpack("<f", struct.pack("<f", float(v)))[0] if abs(float(v)) < 3.4e38 else float(v)


def round_to(v, ty):
    """Decimal v rounded once to f64 or f32 (via the exact binary64 neighbours for f32)."""
    d = float(v)  # correctly rounded by Python
    if ty == "f64":
        return d
    # double rounding f64 -> f32 is avoided by checking the residual
    r = f32(d)
    if D(r) != v:
        lo, hi = sorted((r, next_f32(r, -1 if D(r) > v else 1)))
        r = lo if abs(D(lo) - v) < abs(D(hi) - v) else hi
    return r


def next_f32(x, direction):
    b = struct.unpack("<I", struct.pack("<f", x))[0]
    if x == 0:
        return struct.unpack("<f", struct.pack("<I", 1 if direction > 0 else 0x80000001))[0]
    if (x > 0) == (direction > 0):
        b += 1
    else:
        b -= 1
    return struct.unpack("<f", struct.pack("<I", b))[0]


def series(z, term, n0=0, tol=D(10) ** -70):
    """sum_{k >= n0} term(k) * z^(k - n0)."""
    s, p, k = D(0), D(1), n0
    while True:
        t = term(k) * p
        s += t
        if abs(t) < tol and k > n0 + 2:
            return s
        p *= z
        k += 1


def fact(n):
    r = 1
    for i in range(2, n + 1):
        r *= i
    return D(r)


def erf_dec(x):
    # Taylor series; 80 digits leave > 60 after the cancellation at x = 6.
    z = x * x
    s = series(-z, lambda n: D(1) / (fact(n) * (2 * n + 1)), 0)
    return 2 / SQRTPI * x * s


def atan_dec(t):
    return t * series(-t * t, lambda n: D(1) / (2 * n + 1), 0)


# ---- target functions (g, weight) in the fit variable ------------------------------------

def g_exp(r):  # e^r = 1 + r + r^2 P(r); also expm1(r) = r + r^2 P(r)
    return series(r, lambda k: 1 / fact(k + 2), 0)


def w_exp(r):  # relative error of expm1 dominates that of exp (|r| >= r^2 / e^r here)
    return abs(r) / (1 if r == 0 else abs((r.exp() - 1) / r))


def g_log_r(z):  # log1p(f) = 2 atanh(s) = 2s + s z R(z): R(z) = (2 atanh(s)/s - 2) / z
    return series(z, lambda k: D(2) / (2 * k + 3), 0)


def w_log_r(z):
    return z


def g_log_q(z):  # pow: log(m) = 2s + 2s^3/3 + s^5 Q(z)
    return series(z, lambda k: D(2) / (2 * k + 5), 0)


def w_log_q(z):
    return z * z


def g_sin(z):  # sin r = r + r^3 S(z)
    return series(z, lambda k: (-1) ** (k + 1) / fact(2 * k + 3), 0)


def w_sin(z):
    return z


def g_cos(z):  # cos r = 1 - z/2 + z^2 C(z)
    return series(z, lambda k: (-1) ** k / fact(2 * k + 4), 0)


def w_cos(z):
    r = z.sqrt()
    return z * z / (1 - z / 2 + z * z / 24)


def g_tanh(z):  # tanh x = x + x^3 T(z)
    if z < D("1e-8"):
        return D(-1) / 3 + 2 * z / 15 - 17 * z * z / 315 + 62 * z ** 3 / 2835
    x = z.sqrt()
    e = (2 * x).exp()
    return ((e - 1) / (e + 1) - x) / (x * z)


def w_tanh(z):
    return z


def g_atan(z):  # atan t = t + t^3 A(z)
    return series(-z, lambda k: D(1) / (2 * k + 3), 0) * -1


def w_atan(z):
    return z


def g_erf(z):  # erf x = x + x E(z): the rounding of E(0) = 2/sqrt(pi) - 1 costs less
    return 2 / SQRTPI * series(-z, lambda n: D(1) / (fact(n) * (2 * n + 1)), 0) - 1


def w_erf(z):
    return 1 / (1 + g_erf(z))


def erfcx_dec(x):
    """e^(x^2) erfc(x) for x >= 1/2: erf's Taylor series below 2.5 (>= 68 correct digits), else
    the continued fraction erfc x = e^(-x^2) / sqrt(pi) / (x + (1/2) / (x + 1 / (x + (3/2) / ...)))
    summed backwards from 800 terms (>= 79 digits for x >= 2.5)."""
    if x < D("2.5"):
        return (1 - erf_dec(x)) * (x * x).exp()
    f = x
    for k in range(800, 0, -1):
        f = x + D(k) / 2 / f
    return 1 / (SQRTPI * f)


def erfc_near(x):  # M(x) = log erfc(x) + x^2 (erfc = e^(-x^2 + M)); its error is erfc's relative error
    return erfcx_dec(x).ln()


def erfc_far(w):  # N(w) = log(x erfc(x)) + x^2, w = 1/x^2 (erfc = e^(-x^2 + N) / x)
    x = 1 / w.sqrt()
    return (x * erfcx_dec(x)).ln()


def g_erfl(t):  # f32 erf for x = t + 5/2 in [1, 4]: erf = 1 - e^(-x^2 + M(t)), M = log erfc(x) + x^2
    return erfc_near(t + D("2.5"))


def w_erfl(t):  # an error d in M is an error d erfc(x) of erf, in units of ulp(erf) = 2^-24
    x = t + D("2.5")
    return erfcx_dec(x) * (-x * x).exp() * 2 ** 24


def w_one(x):
    return D(1)


# ---- Remez exchange on a grid --------------------------------------------------------------

def solve(a, b):
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(m[r][c]))
        m[c], m[p] = m[p], m[c]
        for r in range(c + 1, n):
            f = m[r][c] / m[c][c]
            for j in range(c, n + 1):
                m[r][j] -= f * m[c][j]
    x = [D(0)] * n
    for r in range(n - 1, -1, -1):
        x[r] = (m[r][n] - sum(m[r][j] * x[j] for j in range(r + 1, n))) / m[r][r]
    return x


def horner(c, v):
    s = D(0)
    for a in reversed(c):
        s = s * v + a
    return s


def remez(g, w, a, b, deg, npts=1500, iters=30, fixed=()):
    """Coefficients 0..deg of the weighted minimax polynomial, the first len(fixed) of them
    held at the given values."""
    a, b = D(a), D(b)
    cos = lambda t: D(__import__("math").cos(t))
    grid = sorted({(a + b) / 2 + (b - a) / 2 * cos(__import__("math").pi * i / (npts - 1)) for i in range(npts)})
    grid[0], grid[-1] = a, b
    grid = [v for v in grid if w(v) != 0]  # a zero weight cannot carry an alternation point
    npts = len(grid)
    gv = [g(v) - horner([D(x) for x in fixed], v) for v in grid]
    wv = [w(v) for v in grid]
    j0 = len(fixed)
    n = deg + 1 - j0
    ref = [grid[round(i * (npts - 1) / n)] for i in range(n + 1)]
    idx = [grid.index(v) for v in ref]
    best = None
    for _ in range(iters):
        rows = [[grid[i] ** j if j else D(1) for j in range(j0, j0 + n)] + [D((-1) ** k) / wv[i]]
                for k, i in enumerate(idx)]
        sol = solve(rows, [gv[i] for i in idx])
        c = [D(0)] * j0 + sol[:n]
        err = [(gv[i] - horner(c, grid[i])) * wv[i] for i in range(npts)]
        emax = max(abs(e) for e in err)
        if best is None or emax < best[0]:
            best = (emax, [D(x) for x in fixed] + c[j0:])
        # extrema of alternating runs
        runs = []
        for i, e in enumerate(err):
            s = e >= 0
            if runs and runs[-1][0] == s:
                if abs(e) > abs(err[runs[-1][1]]):
                    runs[-1][1] = i
            else:
                runs.append([s, i])
        while len(runs) > n + 1:
            k = min(range(len(runs)), key=lambda j: abs(err[runs[j][1]]))
            if k == 0 or k == len(runs) - 1:
                runs.pop(k)
            else:
                runs.pop(k)
                l, r = runs[k - 1], runs[k]
                keep = l if abs(err[l[1]]) >= abs(err[r[1]]) else r
                runs[k - 1:k + 1] = [keep]
        if len(runs) < n + 1:
            break
        new = [r[1] for r in runs]
        if new == idx:
            break
        idx = new
    return best


def rounded_error(g, w, a, b, coeffs, npts=4000):
    a, b = D(a), D(b)
    worst = D(0)
    for i in range(npts):
        v = a + (b - a) * i / (npts - 1)
        wt = w(v)
        if wt != 0:
            worst = max(worst, abs((g(v) - horner([D(x) for x in coeffs], v)) * wt))
    return worst


# name: (g, w, lo, hi, degree, type)
H = LN2 / 2 * D("1.0001")
SMAX2 = ((D(2).sqrt() - 1) / (D(2).sqrt() + 1)) ** 2
PIO4_2 = (PI / 4 * D("1.0001")) ** 2
# f32 rounds x * 2/pi with up to 2^-7 error in k for |x| < 2^17: |r| reaches 0.79
R32_2 = D("0.8") ** 2
FITS = {
    "exp_f32": (g_exp, w_exp, -H, H, 5, "f32"),
    "exp_f64": (g_exp, w_exp, -H, H, 10, "f64"),
    "log_f32": (g_log_r, w_log_r, 0, SMAX2, 2, "f32"),
    "log_f64": (g_log_r, w_log_r, 0, SMAX2, 6, "f64"),
    "logq_f32": (g_log_q, w_log_q, 0, SMAX2, 3, "f32"),
    "logq_f64": (g_log_q, w_log_q, 0, SMAX2, 8, "f64"),
    "sin_f32": (g_sin, w_sin, 0, R32_2, 3, "f32"),
    "sin_f64": (g_sin, w_sin, 0, PIO4_2, 6, "f64"),
    "cos_f32": (g_cos, w_cos, 0, R32_2, 3, "f32"),
    "cos_f64": (g_cos, w_cos, 0, PIO4_2, 6, "f64"),
    "tanh_f32": (g_tanh, w_tanh, 0, D("0.390625"), 5, "f32"),
    "tanh_f64": (g_tanh, w_tanh, 0, D("0.390625"), 12, "f64"),
    "atan_f32": (g_atan, w_atan, 0, D("0.19140625"), 5, "f32"),
    "atan_f64": (g_atan, w_atan, 0, D("0.19140625"), 11, "f64"),
    "erf_f32": (g_erf, w_erf, 0, D(1), 6, "f32"),
    "erf_f64": (g_erf, w_erf, 0, D(1), 13, "f64"),
    "erfl_f32": (g_erfl, w_erfl, D("-1.5"), D("1.5"), 10, "f32"),
}


# erfc for x >= 1/2 (erf for |x| >= 1 is 1 - erfc): pieces [lo, hi) of M(x) as polynomials in
# t = x - (lo + hi) / 2, then one piece of N as a polynomial in w = 1/x^2 up to where erfc
# rounds to 0 (ir/math.c: erfc_tail). Weight 1: an error d in M or N is a relative error d of erfc.
ERFC_PIECES = {
    "f32": [("near", D("0.5"), D("2.5"), 10), ("far", D("2.5"), D("10.0625"), 9)],
    "f64": [("near", D("0.5"), D("1.5"), 16), ("near", D("1.5"), D("2.5"), 16),
            ("near", D("2.5"), D(4), 16), ("far", D(4), D("27.25"), 16)],
}


def fit_rounded(g, w, lo, hi, deg, ty, npts=1500, iters=30):
    """Rounds the coefficients one at a time from the constant term up, refitting the ones not
    yet rounded each time, so later coefficients absorb the rounding of earlier ones."""
    emax, c = remez(g, w, lo, hi, deg, npts, iters)
    naive = [round_to(x, ty) for x in c]
    fixed = []
    for j in range(deg + 1):
        if 0 < j < deg - 1:  # with fewer than three free coefficients the exchange degenerates
            c = remez(g, w, lo, hi, deg, npts, iters, fixed)[1]
        fixed.append(round_to(c[j], ty))
    # the refit can lose to plain rounding where the exchange degenerates: keep the better
    if rounded_error(g, w, lo, hi, naive, 1000) < rounded_error(g, w, lo, hi, fixed, 1000):
        return naive, emax
    return fixed, emax


def fit(name):
    g, w, lo, hi, deg, ty = FITS[name]
    cr, emax = fit_rounded(g, w, lo, hi, deg, ty)
    return cr, emax, rounded_error(g, w, lo, hi, cr)


# f32 gelu x = x Phi(x) for results rounded to f16 or bf16 next (ir/math.c: kir_gelu16):
# Phi(-a) = e^(-a^2/2 + G(a)) for a = |x|, with G(a) = log Phi(-a) + a^2/2 in pieces [lo, hi) as
# polynomials in t = a - (lo + hi) / 2, up to where gelu rounds to 0, single-word coefficients.
# Weight 1 (an error d in G is a relative error d of Phi(-a)).
GELU16_PIECES = [("near", D(0), D(4), 10), ("near", D(4), D("14.5"), 10)]


def gelu_near(a):
    return (erfcx_dec(a / D(2).sqrt()) / 2).ln()


def split_leading(cs, ty, words):
    """Coefficients as table entries: c0 and c1 as `words` numbers of the type each, the rest
    rounded; and the values those entries sum to, coefficient by coefficient."""
    cr, exact = [], []
    for j, v in enumerate(cs):
        parts = split(v, ty, words if j < 2 else 1)
        cr += parts
        exact.append(sum(D(p) for p in parts))
    return cr, exact


def fit_erfc(ty, pieces=None, near=erfc_near, words=2):
    """Per piece: the minimax coefficients with c0 and c1 as double-word values (hi, lo of the
    type: ir/math.c adds c0 + c1 t exactly) and the others rounded to the type. Rounding c2 and
    up costs a few bits of the minimax error, which stays below 2^-28 (f32) and 2^-58 (f64); a
    refit of the remaining coefficients (fit_rounded) degenerates here, the fixed terms
    vanishing at t = 0 inside the interval. gelu's pieces come through `pieces` and `near`."""
    out = []
    for kind, lo, hi, deg in pieces or ERFC_PIECES[ty]:
        if kind == "near":
            c = (lo + hi) / 2
            g, a, b = (lambda t, c=c: near(t + c)), lo - c, hi - c
        else:
            c = D(0)
            g, a, b = erfc_far, 1 / (hi * hi), 1 / (lo * lo)
        emax, cs = remez(g, w_one, a, b, deg, npts=600, iters=20)
        cr, exact = split_leading(cs, ty, words)
        out.append((kind, lo, hi, c, cr, emax, rounded_error(g, w_one, a, b, exact, npts=800)))
    return out


# f32 gelu' (ir/math.c: kir_gelu_grad): Q(a) = Phi(-a) e^(a^2/2) = t F(t), t = 2 / (2 + a) for a in
# [0, 14.5], F a polynomial in s = t - 1 with F(1) = Q(0) = 1/2 held exactly (gelu'(0) = 1/2).
# Weight 1/F: an error d in F is a relative error d of Q. The coefficients are rounded one at a
# time from c1 up, refitting the rest (fit_rounded without its fallback; degree 11 is where that
# refit does best, 2^-25.7).
GELUD_DEG = 11


def gelud_f(s):
    t = s + 1
    a = 2 / t - 2
    return erfcx_dec(a / D(2).sqrt()) / 2 / t


# f32 gelu (ir/math.c: kir_gelu): the same Q = t F(t), with F a polynomial in u = t - GELUF_MID
# (|u| <= 0.44 evaluates better than s = t - 1), c0 and c1 as double words (split like the erfc
# pieces' and added last), the rest rounded to f32. Weight 1/F.
GELUF_DEG, GELUF_MID = 13, D("0.5625")


def fit_geluf():
    g = lambda u: gelud_f(u + GELUF_MID - 1)
    w = lambda u: 1 / g(u)
    lo, hi = D(2) / D("16.5") - GELUF_MID, 1 - GELUF_MID
    emax, cs = remez(g, w, lo, hi, GELUF_DEG, npts=600, iters=20)
    cr, exact = split_leading(cs, "f32", 2)
    return cr, emax, rounded_error(g, w, lo, hi, exact, npts=3000)


def fit_gelud():
    w = lambda s: 1 / gelud_f(s)
    lo, hi = D(2) / D("16.5") - 1, D(0)
    fixed = [D("0.5")]
    for j in range(1, GELUD_DEG + 1):
        if j < GELUD_DEG - 1:
            c = remez(gelud_f, w, lo, hi, GELUD_DEG, 1200, 25, fixed)[1]
        fixed.append(D(round_to(c[j], "f32")))
    return fixed, rounded_error(gelud_f, w, lo, hi, fixed, 3000)


def c_lit(v, ty):
    if ty == "f64":
        return float(v).hex()
    return float(v).hex() + "f"


def split(v, ty, parts, bits=None):
    """v as a sum of `parts` numbers of the type, each the rounding of what is left
    (the first one cut to `bits` significant bits when given)."""
    out, rest = [], v
    for i in range(parts):
        p = round_to(rest, ty)
        if i == 0 and bits:
            m, e = __import__("math").frexp(float(rest))
            p = __import__("math").ldexp(int(m * 2 ** bits) , e - bits)
        out.append(p)
        rest -= D(p)
    return out


def constants():
    for ty in ("f32", "f64"):
        print(f"/* {ty} */")
        print("pio2:", ", ".join(c_lit(x, ty) for x in split(PI / 2, ty, 3)))
        print("ln2:", ", ".join(c_lit(x, ty) for x in split(LN2, ty, 2)))
        print("ln2 (hi cut to 16/40 bits):", ", ".join(c_lit(x, ty) for x in split(LN2, ty, 2, 16 if ty == "f32" else 40)))
        print("log2e:", ", ".join(c_lit(x, ty) for x in split(1 / LN2, ty, 2)))
        print("2/pi:", c_lit(round_to(2 / PI, ty), ty))
        print("pi:", ", ".join(c_lit(x, ty) for x in split(PI, ty, 2)))
        print("pi/2:", ", ".join(c_lit(x, ty) for x in split(PI / 2, ty, 2)))
        print("pi/4:", ", ".join(c_lit(x, ty) for x in split(PI / 4, ty, 2)))
        print("atan(1/2):", ", ".join(c_lit(x, ty) for x in split(atan_dec(D(1) / 2), ty, 2)))
        print("2/3:", ", ".join(c_lit(x, ty) for x in split(D(2) / 3, ty, 2)))


def main():
    names = sys.argv[1:] or list(FITS) + ["erfc_f32", "erfc_f64", "gelu16_f32", "geluf_f32", "gelud_f32", "constants"]
    for name in names:
        if name == "constants":
            constants()
        elif name == "geluf_f32":
            cr, e, er = fit_geluf()
            print(f"/* geluf_f32: minimax 2^{float(e.ln() / LN2):.1f}, rounded 2^{float(er.ln() / LN2):.1f} */")
            print("static const double GELUF_F32[] = {" + ", ".join(float(x).hex() for x in cr) + "};")
        elif name == "gelud_f32":
            cr, er = fit_gelud()
            print(f"/* gelud_f32: rounded 2^{float(er.ln() / LN2):.1f} */")
            print("static const double GELUD_F32[] = {" + ", ".join(float(x).hex() for x in cr) + "};")
        elif name.startswith("erfc_") or name.startswith("gelu"):
            ty, tbl = (name[5:], "ERFC") if name.startswith("erfc_") else ("f32", name[:-4].upper())
            if tbl == "ERFC":
                pieces = fit_erfc(ty)
            else:
                pieces = fit_erfc(ty, GELU16_PIECES, gelu_near, words=1)
            for i, (kind, lo, hi, c, cr, e, er) in enumerate(pieces):
                var = f"t = x - {float(c)}" if kind == "near" else "w = 1/x^2"
                print(f"/* {name} {kind} [{lo}, {hi}) {var}: minimax 2^{float(e.ln() / LN2):.1f}, "
                      f"rounded 2^{float(er.ln() / LN2):.1f} */")
                sep = "_" if tbl[-1].isdigit() else ""
                print(f"static const double {tbl}{sep}{i}_{ty[1:]}[] = {{" + ", ".join(float(x).hex() for x in cr) + "};")
        else:
            cr, e, er = fit(name)
            ty = FITS[name][5]
            print(f"/* {name}: minimax {float(e):.3g} (2^{float(e.ln() / LN2):.1f}), rounded {float(er):.3g} */")
            print(f"static const double {name.upper()}[] = {{" + ", ".join(float(x).hex() for x in cr) + "};")


if __name__ == "__main__":
    main()
