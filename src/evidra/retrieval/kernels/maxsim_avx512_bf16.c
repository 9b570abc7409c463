/* Exact MaxSim in bf16 on AVX-512 CPUs with AVX512_BF16 (vdpbf16ps), fused: pages are read once
 * in bf16, multiplied with the query tokens two dimensions per instruction (bf16 products, fp32
 * sums) and reduced to each token's best match, so the similarity matrix is never written.
 *
 * Layout. vdpbf16ps multiplies 16 lanes of two bf16 values each, pairwise, and adds both products
 * to 16 fp32 sums. One register holds dimensions 2k and 2k + 1 of 16 page vectors (a "pair row");
 * each query token's pair k is broadcast to all lanes, so one instruction adds two dimensions of
 * one token's similarity with 16 page vectors. A row-major block (C, L, D) has each tile of 16
 * vectors transposed, 16 pairs (32 dimensions) at a time, into D / 2 pair rows in an L1 buffer
 * (16 KB at most for D = 512); a block the index holds for this kernel ("tiled",
 * (C, L / 16, D / 2, 16, 2)) is read as it lies. Query tokens come in groups of up to GROUP
 * tokens, arranged pair-major: (groups, D / 2, GROUP) pairs of bf16. The GROUP accumulators stay in
 * registers for all D / 2 pairs; the running max of every token over the page's tiles is kept per
 * lane and reduced across lanes once per page. Rows of a tile past a page's length are masked out
 * of the max, so filler never wins.
 *
 * Built by evidra.retrieval.maxsim_avx512_bf16 with the system C compiler at first use; scored
 * pages are split between threads by the caller (each call takes a range of pages).
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#define GROUP 24 /* query tokens per pass: 24 accumulators + the pair row fit AVX-512's 32 registers */
#define MAX_DIM 512

/* r[i] holds row i (16 x 32 bits); afterwards r[j] holds column j. Only moves bits. */
static inline void transpose16(__m512i r[16]) {
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    /* r[4g + j] now holds, in 128-bit lane m, column 4m + j of rows 4g .. 4g + 3 */
    for (int j = 0; j < 4; j++) {
        t[j] = _mm512_shuffle_i32x4(r[j], r[4 + j], 0x88);
        t[4 + j] = _mm512_shuffle_i32x4(r[j], r[4 + j], 0xdd);
        t[8 + j] = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0x88);
        t[12 + j] = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0xdd);
    }
    for (int j = 0; j < 4; j++) {
        r[j] = _mm512_shuffle_i32x4(t[j], t[8 + j], 0x88);
        r[8 + j] = _mm512_shuffle_i32x4(t[j], t[8 + j], 0xdd);
        r[4 + j] = _mm512_shuffle_i32x4(t[4 + j], t[12 + j], 0x88);
        r[12 + j] = _mm512_shuffle_i32x4(t[4 + j], t[12 + j], 0xdd);
    }
}

/* vectors [0, n) of the 16 at `src` (row-major, dim bf16 each) -> pair rows tile[k * 16 + vector];
 * vectors >= n are zeros */
static inline void pair_rows(const uint16_t *src, int n, int64_t dim, uint32_t *tile) {
    __m512i r[16];
    for (int64_t k0 = 0; k0 < dim; k0 += 32) {
        for (int i = 0; i < 16; i++) {
            r[i] = i < n ? _mm512_loadu_si512((const void *)(src + i * dim + k0)) : _mm512_setzero_si512();
        }
        transpose16(r);
        for (int j = 0; j < 16; j++) _mm512_store_si512((void *)(tile + (k0 / 2 + j) * 16), r[j]);
    }
}

/* Software prefetch of the tile AHEAD tiles on, into L2, as the fp32 AVX-512 kernel does: one
 * query reads pages faster than the hardware prefetcher alone brings them in. */
#define AHEAD 4
static inline void prefetch_tile(const uint16_t *tile, int64_t dim) {
    const char *base = (const char *)(tile + AHEAD * 16 * dim);
    for (int64_t b = 0; b < 16 * dim * 2; b += 64) __builtin_prefetch(base + b, 0, 1);
}

/* best[j] = max(best[j], tile . query token j) over the tile's valid vectors, for NQ tokens; pair
 * row k of the tile is at rows[k * 16], token j's pair k at q[k * GROUP + j] */
static inline __attribute__((always_inline)) void group_kernel(
    const int NQ, const uint32_t *rows, const uint32_t *q, int64_t pairs, __mmask16 valid, __m512 *best) {
    __m512 acc[GROUP];
#pragma GCC unroll 24
    for (int j = 0; j < NQ; j++) acc[j] = _mm512_setzero_ps();
    for (int64_t k = 0; k < pairs; k++) {
        __m512bh row = (__m512bh)_mm512_load_si512((const void *)(rows + k * 16));
        const uint32_t *qk = q + k * GROUP;
#pragma GCC unroll 24
        for (int j = 0; j < NQ; j++) acc[j] = _mm512_dpbf16_ps(acc[j], row, (__m512bh)_mm512_set1_epi32((int)qk[j]));
    }
#pragma GCC unroll 24
    for (int j = 0; j < NQ; j++) best[j] = _mm512_mask_max_ps(best[j], valid, best[j], acc[j]);
}

#define CASE(n) \
    case n: group_kernel(n, rows, q, pairs, valid, best); break;

/* the kernel for nq tokens, each count a constant in its own copy of the loop */
static void group_dispatch(int nq, const uint32_t *rows, const uint32_t *q, int64_t pairs, __mmask16 valid,
                           __m512 *best) {
    switch (nq) {
        CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7) CASE(8) CASE(9) CASE(10) CASE(11) CASE(12)
        CASE(13) CASE(14) CASE(15) CASE(16) CASE(17) CASE(18) CASE(19) CASE(20) CASE(21) CASE(22) CASE(23)
        CASE(24)
        default: break;
    }
}

/* Scores one page of n vectors at `page` (row-major, or `tiled`: pair rows 16 vectors at a time,
 * zero filler up to a multiple of 16) into out[0 .. tokens): each token's max. */
static void score_page(const uint16_t *page, int64_t n, int tiled, int64_t dim, const uint32_t *queries,
                       int64_t tokens, float *best, float *out) {
    uint32_t tile[MAX_DIM / 2 * 16] __attribute__((aligned(64)));
    __m512 *runs = (__m512 *)best;
    const __m512 floor = _mm512_set1_ps(-INFINITY);
    const int64_t pairs = dim / 2;
    for (int64_t j = 0; j < tokens; j++) runs[j] = floor;
    for (int64_t t0 = 0; t0 < n; t0 += 16) {
        int count = n - t0 < 16 ? (int)(n - t0) : 16;
        __mmask16 valid = (__mmask16)((1u << count) - 1u);
        const uint16_t *src = page + t0 * dim;
        const uint32_t *rows = (const uint32_t *)src;
        prefetch_tile(src, dim); /* past the page: the next one's (a prefetch never faults) */
        if (!tiled) {
            pair_rows(src, count, dim, tile);
            rows = tile;
        }
        for (int64_t g = 0; g * GROUP < tokens; g++) {
            int64_t nq = tokens - g * GROUP < GROUP ? tokens - g * GROUP : GROUP;
            group_dispatch((int)nq, rows, queries + g * GROUP * pairs, pairs, valid, runs + g * GROUP);
        }
    }
    for (int64_t j = 0; j < tokens; j++) out[j] = _mm512_reduce_max_ps(runs[j]);
}

/* Scores pages [begin, end) of one block.
 *   pages   (C, L, dim) bf16, row-major, or with `tiled` (C, L / 16, dim / 2, 16, 2): pair rows of
 *           16 vectors at a time (L a multiple of 16), which need no transposing here
 *   lengths (C,) real vectors per page
 *   queries (groups, dim / 2, GROUP) pairs of bf16: token g * GROUP + j's pair k at [g][k][j],
 *           zero-padded
 *   best    (tokens, 16) fp32 scratch, 64-byte aligned; out (C, tokens) fp32: each token's max
 * Returns 0, or -1 when dim is not a multiple of 32 or exceeds MAX_DIM, or a tiled L is not a
 * multiple of 16. */
int evidra_maxsim_bf16_block(const uint16_t *pages, int tiled, int64_t length, int64_t dim,
                             const int64_t *lengths, int64_t begin, int64_t end, const uint32_t *queries,
                             int64_t tokens, float *best, float *out) {
    if (dim % 32 != 0 || dim > MAX_DIM || dim <= 0 || (tiled && length % 16 != 0)) return -1;
    for (int64_t p = begin; p < end; p++) {
        int64_t n = lengths[p] < length ? lengths[p] : length;
        score_page(pages + p * length * dim, n, tiled, dim, queries, tokens, best, out + p * tokens);
    }
    return 0;
}
