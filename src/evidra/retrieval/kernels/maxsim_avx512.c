/* Exact MaxSim in fp32 on AVX-512 CPUs, fused: pages are read once in their stored dtype, widened
 * to fp32 in registers, multiplied with the query tokens and reduced to each token's best match,
 * so neither a widened copy of the pages nor the similarity matrix is ever written to memory.
 *
 * Layout. A block holds C pages of L vectors of D floats (D a multiple of 16), zero-filled past
 * each page's length. Pages are taken 16 vectors at a time, as D rows of 16 values: one register
 * holds one dimension of 16 page vectors. A block the index keeps for this kernel is stored that
 * way ("tiled"); a row-major block (pages copied out for a re-score) has each 16 x D tile widened
 * and transposed into a D x 16 buffer in L1 first (16 KB at most for D = 256). Query tokens come in groups of up to GROUP tokens, arranged
 * dimension-major (k, token); for each dimension k the kernel broadcasts each token's k-th value
 * and multiply-adds it with the tile's row k: GROUP accumulators of 16 similarities each, which
 * stay in registers for all D dimensions. The running max of every query token over the page's
 * tiles is kept per lane and reduced across lanes once per page.
 *
 * Built by evidra.retrieval.maxsim_avx512 with the system C compiler at first use; scored pages
 * are split between threads by the caller (each call takes a range of pages).
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define GROUP 24 /* query tokens per pass: 24 accumulators + the tile row fit AVX-512's 32 registers */
#define MAX_DIM 256

enum { F32 = 0, F16 = 1, BF16 = 2 };

static inline __m512 load16(const void *src, int64_t at, int kind) {
    if (kind == F16) {
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)src + at)));
    }
    if (kind == BF16) {
        __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)src + at)));
        return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
    }
    return _mm512_loadu_ps((const float *)src + at);
}

/* r[i] holds row i (16 floats); afterwards r[j] holds column j. */
static inline void transpose16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 1]);
        __m512d c = _mm512_castps_pd(t[i + 2]), d = _mm512_castps_pd(t[i + 3]);
        r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    /* r[4g + j] now holds, in 128-bit lane m, column 4m + j of rows 4g .. 4g + 3 */
    for (int j = 0; j < 4; j++) {
        t[j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88);
        t[4 + j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xdd);
        t[8 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
        t[12 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xdd);
    }
    for (int j = 0; j < 4; j++) {
        r[j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88);
        r[8 + j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xdd);
        r[4 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0x88);
        r[12 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0xdd);
    }
}

/* rows [0, n) of the tile at `src` (row stride dim) -> tile[k * 16 + row] in fp32; rows >= n are 0 */
static inline void widen_tile(const void *src, int64_t first, int n, int64_t dim, int kind, float *tile) {
    __m512 r[16];
    for (int64_t k0 = 0; k0 < dim; k0 += 16) {
        for (int i = 0; i < 16; i++) {
            r[i] = i < n ? load16(src, first + i * dim + k0, kind) : _mm512_setzero_ps();
        }
        transpose16(r);
        for (int j = 0; j < 16; j++) {
            _mm512_store_ps(tile + (k0 + j) * 16, r[j]);
        }
    }
}

/* Software prefetch of the tile AHEAD tiles on, into L2 (prefetcht2): one query reads pages faster
 * than the hardware prefetcher alone brings them in. Measured on 2 Xeon cores, 10k pages of
 * 256 x 128 in fp16, 20 query tokens: 103 ms without it, 65 ms with it (AHEAD 2 to 16 alike); a
 * non-temporal prefetch made it slower (125 ms) */
#define AHEAD 4
static inline void prefetch_tile(const void *src, int64_t at, int64_t dim, int kind) {
    int64_t size = kind == F32 ? 4 : 2;
    const char *base = (const char *)src + (at + AHEAD * 16 * dim) * size;
    for (int64_t b = 0; b < 16 * dim * size; b += 64) __builtin_prefetch(base + b, 0, 1);
}

/* best[j] = max(best[j], tile . query token j) over the tile's valid vectors, for NQ tokens; the
 * tile's row k (16 vectors' k-th values) is at src[at + k * 16] in `kind` */
static inline __attribute__((always_inline)) void group_kernel(
    const int NQ, const void *src, int64_t at, int kind, const float *q, int64_t dim, __mmask16 valid,
    __m512 *best) {
    __m512 acc[GROUP];
#pragma GCC unroll 24
    for (int j = 0; j < NQ; j++) acc[j] = _mm512_setzero_ps();
    for (int64_t k = 0; k < dim; k++) {
        __m512 row = load16(src, at + k * 16, kind);
        const float *qk = q + k * GROUP;
#pragma GCC unroll 24
        for (int j = 0; j < NQ; j++) acc[j] = _mm512_fmadd_ps(_mm512_set1_ps(qk[j]), row, acc[j]);
    }
#pragma GCC unroll 24
    for (int j = 0; j < NQ; j++) best[j] = _mm512_mask_max_ps(best[j], valid, best[j], acc[j]);
}

#define CASE(n, K) \
    case n: group_kernel(n, src, at, K, q, dim, valid, best); break;
#define CASES(K)                                                                                         \
    switch (nq) {                                                                                        \
        CASE(1, K) CASE(2, K) CASE(3, K) CASE(4, K) CASE(5, K) CASE(6, K) CASE(7, K) CASE(8, K) CASE(9, K) \
        CASE(10, K) CASE(11, K) CASE(12, K) CASE(13, K) CASE(14, K) CASE(15, K) CASE(16, K) CASE(17, K)  \
        CASE(18, K) CASE(19, K) CASE(20, K) CASE(21, K) CASE(22, K) CASE(23, K) CASE(24, K)              \
        default: break;                                                                                  \
    }

/* the kernel for nq tokens and the tile's dtype, each a constant in its own copy of the loop */
static void group_dispatch(int nq, const void *src, int64_t at, int kind, const float *q, int64_t dim,
                           __mmask16 valid, __m512 *best) {
    if (kind == F16) {
        CASES(F16)
    } else if (kind == BF16) {
        CASES(BF16)
    } else {
        CASES(F32)
    }
}

/* Scores one page of n vectors at `page` (row-major, or `tiled` with n a multiple of 16 or zero
 * filler up to it) into out[0 .. tokens): each token's max. */
static void score_page(const void *page, int64_t n, int kind, int tiled, int64_t dim, const float *queries,
                       int64_t tokens, float *best, float *out) {
    float tile[MAX_DIM * 16] __attribute__((aligned(64)));
    __m512 *runs = (__m512 *)best;
    const __m512 floor = _mm512_set1_ps(-INFINITY);
    for (int64_t j = 0; j < tokens; j++) runs[j] = floor;
    for (int64_t t0 = 0; t0 < n; t0 += 16) {
        int rows = n - t0 < 16 ? (int)(n - t0) : 16;
        __mmask16 valid = (__mmask16)((1u << rows) - 1u);
        const void *src = page;
        int64_t at = t0 * dim;
        int src_kind = kind;
        prefetch_tile(page, at, dim, kind); /* past the page: the next one's (a prefetch never faults) */
        if (!tiled) {
            widen_tile(page, at, rows, dim, kind, tile);
            src = tile, at = 0, src_kind = F32;
        }
        for (int64_t g = 0; g * GROUP < tokens; g++) {
            int64_t nq = tokens - g * GROUP < GROUP ? tokens - g * GROUP : GROUP;
            group_dispatch((int)nq, src, at, src_kind, queries + g * GROUP * dim, dim, valid, runs + g * GROUP);
        }
    }
    for (int64_t j = 0; j < tokens; j++) out[j] = _mm512_reduce_max_ps(runs[j]);
}

/* Scores pages [begin, end) of one block.
 *   pages   (C, L, dim) in `kind`, row-major, or with `tiled` (C, L / 16, dim, 16): 16 vectors at a
 *           time, dimension-major (L a multiple of 16), which needs no transposing here
 *   lengths (C,) real vectors per page
 *   queries (groups, dim, GROUP) fp32: token g * GROUP + j's k-th value at [g][k][j], zero-padded
 *   best    (tokens, 16) fp32 scratch, 64-byte aligned; out (C, tokens) fp32: each token's max
 * Returns 0, or -1 when dim is not a multiple of 16 or exceeds MAX_DIM, or a tiled L is not a
 * multiple of 16. */
int evidra_maxsim_block(const void *pages, int kind, int tiled, int64_t length, int64_t dim,
                        const int64_t *lengths, int64_t begin, int64_t end, const float *queries,
                        int64_t tokens, float *best, float *out) {
    if (dim % 16 != 0 || dim > MAX_DIM || dim <= 0 || (tiled && length % 16 != 0)) return -1;
    int64_t size = kind == F32 ? 4 : 2;
    for (int64_t p = begin; p < end; p++) {
        int64_t n = lengths[p] < length ? lengths[p] : length;
        const char *page = (const char *)pages + p * length * dim * size;
        score_page(page, n, kind, tiled, dim, queries, tokens, best, out + p * tokens);
    }
    return 0;
}

/* Scores `count` row-major pages wherever they are (pages[i]: lengths[i] vectors of dim values in
 * `kind`, e.g. pages of the index's memory-mapped shards, read in place); out (count, tokens).
 * Returns 0, or -1 when dim is not a multiple of 16 or exceeds MAX_DIM. */
int evidra_maxsim_pages(const void *const *pages, const int64_t *lengths, int64_t count, int kind, int64_t dim,
                        const float *queries, int64_t tokens, float *best, float *out) {
    if (dim % 16 != 0 || dim > MAX_DIM || dim <= 0) return -1;
    for (int64_t i = 0; i < count; i++) {
        score_page(pages[i], lengths[i], kind, 0, dim, queries, tokens, best, out + i * tokens);
    }
    return 0;
}
