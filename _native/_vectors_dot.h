/* _vectors_dot.h: the dot product of the memory vector kernel (_vectors_c.pyx), in C so that GCC can build
   an AVX2 clone next to the baseline one and pick one at load time (target_clones). Both clones do the same
   operations in the same order: float32 components widened to double, eight lanes (lane i takes components
   i, i+8, ...) combined as ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)); the module is built with -ffp-contract=off,
   so no clone fuses a multiply and an add. The pure-Python twin (_vectors_py.py) gives the same bits. */
#ifndef AGENTSTATE_VECTORS_DOT_H
#define AGENTSTATE_VECTORS_DOT_H
#include <stddef.h>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
__attribute__((target_clones("avx2", "default")))
#endif
static double agentstate_dot(const float *a, const float *b, ptrdiff_t n)
{
    double d[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    ptrdiff_t i = 0, lane;
    ptrdiff_t n8 = n - (n & 7);
    for (; i < n8; i += 8) {
        for (lane = 0; lane < 8; lane++) {
            d[lane] = d[lane] + (double)a[i + lane] * (double)b[i + lane];
        }
    }
    for (lane = 0; i + lane < n; lane++) {
        d[lane] = d[lane] + (double)a[i + lane] * (double)b[i + lane];
    }
    return ((d[0] + d[1]) + (d[2] + d[3])) + ((d[4] + d[5]) + (d[6] + d[7]));
}
/* The approximate dot product of an int8 row (a quantized float32 row, _vectors_c.quantize) with a float32
   query, in float32 with 32 independent lanes (any order: only its error bound matters, see best_top). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
__attribute__((target_clones("avx2", "default")))
#endif
static float agentstate_qdot(const signed char *a, const float *b, ptrdiff_t n)
{
    float d[32];
    ptrdiff_t i = 0, lane;
    ptrdiff_t n32 = n - (n & 31);
    float r = 0.0f;
    for (lane = 0; lane < 32; lane++) {
        d[lane] = 0.0f;
    }
    for (; i < n32; i += 32) {
        for (lane = 0; lane < 32; lane++) {
            d[lane] = d[lane] + (float)a[i + lane] * b[i + lane];
        }
    }
    for (; i < n; i++) {
        r = r + (float)a[i] * b[i];
    }
    for (lane = 0; lane < 16; lane++) {  /* the lanes combined as a tree: five rounds, not 32 dependent adds */
        d[lane] = d[lane] + d[lane + 16];
    }
    for (lane = 0; lane < 8; lane++) {
        d[lane] = d[lane] + d[lane + 8];
    }
    for (lane = 0; lane < 4; lane++) {
        d[lane] = d[lane] + d[lane + 4];
    }
    d[0] = (d[0] + d[2]) + (d[1] + d[3]);
    return r + d[0];
}
#endif
