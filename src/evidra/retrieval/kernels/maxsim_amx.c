/* Exact MaxSim in bf16 on CPUs with AMX, fused: page vectors are multiplied with the query tokens
 * on the matrix units (fp32 accumulation) and only each token's running max per page is kept, so
 * the similarity matrix is never written beyond one 16 x 16 tile at a time.
 *
 * Operands. AMX multiplies A (16 rows x 32 bf16) by B (16 rows x 16 pairs of bf16: 32 x 16 in
 * "VNNI" order, two consecutive k of one column side by side) into C (16 x 16 fp32). Page vectors
 * are A: 16 consecutive vectors of a page, 32 dimensions per tile, either from a block the index
 * holds tiled, (C, L / 16, D / 32, 16, 32), each tile 1 KB in one piece, or in place from an
 * ordinary (C, L, D) block, 16 rows with a stride of D values. Query tokens are B,
 * arranged once per call (caller): token tile j, dimension slice s is one 1 KB tile, 16 tokens per
 * row. So C holds 16 page vectors x 16 tokens, and the max over a page's vectors is an element-wise
 * max of C's rows: one AVX-512 register per 16 tokens, no reduction across lanes, and a tile's rows
 * past the page's length are simply not read, so filler can never win.
 *
 * Blocking. 8 tile registers: C00 C01 C10 C11 (2 page tiles x 2 token tiles), A0 A1, B0 B1; each
 * A and B tile loaded serves two products. For one pair of page tiles (32 vectors, 8 KB at D 128,
 * which stays in L1) the kernel walks all token tiles in pairs, then moves on. The token tiles of
 * a batch (640 tokens: 40 tiles, 160 KB at D 128) stay in L2.
 *
 * Tiles need the kernel's permission (Linux: arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA, once per
 * process: evidra_amx_permit) and a tile configuration per thread (loaded by every call).
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
#define MAX_DIM 512

/* 0 when Linux lets this process use the tile data registers, else -1 */
int evidra_amx_permit(void) {
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0 ? 0 : -1;
}

struct tile_config {
    uint8_t palette;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

static void configure(void) {
    struct tile_config cfg __attribute__((aligned(64)));
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    _tile_loadconfig(&cfg);
}

/* max over the first `rows` rows of a stored 16 x 16 fp32 tile */
static inline __m512 max_rows(const float *c, int rows, __m512 m) {
    if (rows == 16) {
        __m512 r[8];
        for (int i = 0; i < 8; i++) r[i] = _mm512_max_ps(_mm512_load_ps(c + 32 * i), _mm512_load_ps(c + 32 * i + 16));
        for (int i = 0; i < 4; i++) r[i] = _mm512_max_ps(r[i], r[i + 4]);
        return _mm512_max_ps(m, _mm512_max_ps(_mm512_max_ps(r[0], r[1]), _mm512_max_ps(r[2], r[3])));
    }
    for (int i = 0; i < rows; i++) m = _mm512_max_ps(m, _mm512_load_ps(c + 16 * i));
    return m;
}

/* Page vectors [v, v + 32) (or [v, v + 16) without `two_a`) against token tiles j, j + 1 (or j alone
 * without `two_b`): C = A . B over all `slices` slices of 32 dimensions, then the running maxima
 * runs[j] (and runs[j + 1]) take the max over the tile rows that are real vectors. */
struct layout {
    int64_t stride; /* bytes from one row of an A tile to the next */
    int64_t slice;  /* values from one A tile to the next 32 dimensions of the same vectors */
    int64_t next;   /* values from one A tile to the next 16 vectors */
};

static inline __attribute__((always_inline)) void block_2x2(
    const int two_a, const int two_b, const uint16_t *a, struct layout at, const uint16_t *b, int64_t slices,
    int rows0, int rows1, float *c, __m512 *runs) {
    _tile_zero(0);
    if (two_b) _tile_zero(1);
    if (two_a) _tile_zero(2);
    if (two_a && two_b) _tile_zero(3);
    for (int64_t s = 0; s < slices; s++) {
        _tile_loadd(4, a + at.slice * s, at.stride);
        _tile_loadd(6, b + 512 * s, 64);
        _tile_dpbf16ps(0, 4, 6);
        if (two_b) {
            _tile_loadd(7, b + 512 * (slices + s), 64);
            _tile_dpbf16ps(1, 4, 7);
        }
        if (two_a) {
            _tile_loadd(5, a + at.next + at.slice * s, at.stride);
            _tile_dpbf16ps(2, 5, 6);
            if (two_b) _tile_dpbf16ps(3, 5, 7);
        }
    }
    _tile_stored(0, c, 64);
    if (two_b) _tile_stored(1, c + 256, 64);
    if (two_a) _tile_stored(2, c + 512, 64);
    if (two_a && two_b) _tile_stored(3, c + 768, 64);
    __m512 m = max_rows(c, rows0, runs[0]);
    runs[0] = two_a ? max_rows(c + 512, rows1, m) : m;
    if (two_b) {
        m = max_rows(c + 256, rows0, runs[1]);
        runs[1] = two_a ? max_rows(c + 768, rows1, m) : m;
    }
}

/* every token tile against page vectors [v, v + 32) (`two_a`) or [v, v + 16) */
static inline __attribute__((always_inline)) void token_tiles(
    const int two_a, const uint16_t *a, struct layout at, const uint16_t *queries, int64_t tiles, int64_t slices,
    int rows0, int rows1, float *c, __m512 *runs) {
    int64_t j = 0;
    for (; j + 1 < tiles; j += 2) {
        block_2x2(two_a, 1, a, at, queries + j * slices * 512, slices, rows0, rows1, c, runs + j);
    }
    if (j < tiles) block_2x2(two_a, 0, a, at, queries + j * slices * 512, slices, rows0, rows1, c, runs + j);
}

static inline void prefetch_vectors(const uint16_t *at, int64_t count, int64_t dim) {
    const char *from = (const char *)at, *to = from + count * dim * 2;
    for (const char *line = from; line < to; line += 64) _mm_prefetch(line, _MM_HINT_T0);
}

/* Scores pages [begin, end) of one block.
 *   pages    (C, L, dim) bf16, row-major, zero-filled past each page's length, or with `tiled`
 *            (C, L / 16, dim / 32, 16, 32): tile (i, s) holds dims [32 s, 32 s + 32) of vectors
 *            [16 i, 16 i + 16), L a multiple of 16
 *   lengths  (C,) real vectors per page
 *   queries  (tiles, dim / 32, 16, 32) bf16: token tile j, dimensions [32 s, 32 s + 32) as a B tile
 *            (row r holds dims 32 s + 2 r, 32 s + 2 r + 1 of the tile's 16 tokens, interleaved);
 *            tokens past `tokens` are zeros
 *   owner    (tokens,) the query of each token, 0 .. n_queries - 1
 *   runs     (tiles, 16) fp32 scratch, 64-byte aligned
 *   out      (C, n_queries) fp32: each query's score, the sum of its tokens' maxima (only a query's
 *            score per page leaves the kernel: 32 queries of 20 tokens write 128 bytes per page, not
 *            the 2.5 KB of every token's max)
 * Returns 0, or -1 when dim is not a multiple of 32 or exceeds MAX_DIM, or a tiled L is not a
 * multiple of 16.
 *
 * Prefetch: a row-major tile load touches 16 lines 4 lines apart (row stride 256 bytes at D 128),
 * a pattern the hardware prefetcher follows poorly, so those 32 vectors are prefetched in address
 * order just before their tiles load (one query over 5,000 pages on one core: 30 ms with it, 35
 * without). Tiled pages are read front to back and need none (27 ms either way); asking for pages
 * 1 to 8 pairs of tiles ahead made both slower (35-43 ms). */
int evidra_maxsim_amx(const uint16_t *pages, int tiled, int64_t length, int64_t dim, const int64_t *lengths, int64_t begin,
                      int64_t end, const uint16_t *queries, int64_t tokens, const int32_t *owner, int64_t n_queries,
                      float *runs, float *out) {
    if (dim % 32 != 0 || dim > MAX_DIM || dim <= 0 || (tiled && length % 16 != 0)) return -1;
    float c[4 * 256] __attribute__((aligned(64)));
    uint16_t edge[32 * MAX_DIM] __attribute__((aligned(64))); /* a tile pair that would read past the page */
    const int64_t tiles = (tokens + 15) / 16, slices = dim / 32;
    const struct layout row_major = {dim * 2, 32, 16 * dim}, in_tiles = {64, 512, 512 * slices};
    __m512 *best = (__m512 *)runs;
    configure();
    for (int64_t p = begin; p < end; p++) {
        int64_t n = lengths[p] < length ? lengths[p] : length;
        for (int64_t j = 0; j < tiles; j++) best[j] = _mm512_set1_ps(-INFINITY);
        const uint16_t *page = pages + p * length * dim;
        for (int64_t v = 0; v < n; v += 32) {
            int rows0 = n - v < 16 ? (int)(n - v) : 16;
            int rows1 = n - v - 16 < 16 ? (int)(n - v - 16) : 16;
            const uint16_t *a = page + v * dim; /* the same offset in both layouts */
            struct layout at = tiled ? in_tiles : row_major;
            if (!tiled) prefetch_vectors(a, n - v < 32 ? n - v : 32, dim);
            if (!tiled && v + (rows1 > 0 ? 32 : 16) > length) { /* the tiles would read past the page */
                memset(edge, 0, sizeof(uint16_t) * 32 * dim);
                memcpy(edge, a, sizeof(uint16_t) * (n - v) * dim);
                a = edge;
            }
            if (rows1 > 0) {
                token_tiles(1, a, at, queries, tiles, slices, rows0, rows1, c, best);
            } else {
                token_tiles(0, a, at, queries, tiles, slices, rows0, 0, c, best);
            }
        }
        float *scores = out + p * n_queries;
        for (int64_t q = 0; q < n_queries; q++) scores[q] = 0.0f;
        for (int64_t t = 0; t < tokens; t++) scores[owner[t]] += runs[t];
    }
    _tile_release();
    return 0;
}
