/* Philox 4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as 1, 2, 3",
 * SC'11) and the recipes that turn one block into a rand or randn element. Every device must
 * produce the same bits, so the recipes in ir.h are a contract: change them nowhere. */
#include <math.h>

#include "ir.h"

enum {
    PHILOX_ROUNDS = 10,
};

static const uint32_t PHILOX_M0 = 0xD2511F53u;
static const uint32_t PHILOX_M1 = 0xCD9E8D57u;
static const uint32_t PHILOX_W0 = 0x9E3779B9u; /* golden ratio */
static const uint32_t PHILOX_W1 = 0xBB67AE85u; /* sqrt(3) - 1 */

/* One round: two 32x32->64 multiplies; the high halves mix with the other words and the key,
 * and the words are permuted so every input word reaches every output word within rounds. */
static void philox_round(uint32_t c[4], const uint32_t k[2])
{
    uint64_t p0 = (uint64_t)PHILOX_M0 * c[0];
    uint64_t p1 = (uint64_t)PHILOX_M1 * c[2];
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    uint32_t n0 = hi1 ^ c[1] ^ k[0];
    uint32_t n2 = hi0 ^ c[3] ^ k[1];
    c[0] = n0;
    c[1] = lo1;
    c[2] = n2;
    c[3] = lo0;
}

void ir_philox4x32_block(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
    uint32_t k[2] = {key[0], key[1]};
    for (int r = 0; r < PHILOX_ROUNDS; r++) {
        if (r > 0) { /* the first round uses the key as given */
            k[0] += PHILOX_W0;
            k[1] += PHILOX_W1;
        }
        philox_round(c, k);
    }
    for (int j = 0; j < 4; j++)
        out[j] = c[j];
}

void ir_philox4x32(uint64_t counter, uint64_t key, uint32_t out[4])
{
    const uint32_t c[4] = {(uint32_t)counter, (uint32_t)(counter >> 32), 0, 0};
    const uint32_t k[2] = {(uint32_t)key, (uint32_t)(key >> 32)};
    ir_philox4x32_block(c, k, out);
}

/* The top 53 bits of the 64-bit word hi:lo. */
static uint64_t top53(uint32_t lo, uint32_t hi)
{
    return (((uint64_t)hi << 32) | lo) >> 11;
}

/* Integers times a power of two below 2^(bits): exact in double and in the target dtype, so
 * the largest draw is 1 - 2^-bits, never a rounded-up 1.0. */
double ir_rand_uniform(uint64_t key, uint64_t offset, uint64_t i, burnc_dtype_t dt)
{
    uint32_t w[4];
    ir_philox4x32(offset + i, key, w);
    switch (dt) {
    case BURNC_DTYPE_F64: return ldexp((double)top53(w[0], w[1]), -53);
    case BURNC_DTYPE_F16: return ldexp((double)(w[0] >> 21), -11);
    case BURNC_DTYPE_BF16: return ldexp((double)(w[0] >> 24), -8);
    default: return ldexp((double)(w[0] >> 8), -24); /* f32 */
    }
}

static const double TWO_PI = 6.28318530717958647692;

/* Box-Muller. u1 is shifted up by one step into (0, 1] so log(u1) is finite. */
double ir_rand_normal(uint64_t key, uint64_t offset, uint64_t i, burnc_dtype_t dt)
{
    uint32_t w[4];
    ir_philox4x32(offset + i, key, w);
    double u1, u2;
    if (dt == BURNC_DTYPE_F64) {
        u1 = ldexp((double)(top53(w[0], w[1]) + 1), -53);
        u2 = ldexp((double)top53(w[2], w[3]), -53);
    } else {
        u1 = ldexp((double)((w[0] >> 8) + 1), -24);
        u2 = ldexp((double)(w[2] >> 8), -24);
    }
    return sqrt(-2.0 * log(u1)) * cos(TWO_PI * u2);
}
