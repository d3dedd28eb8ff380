/* The first pass of precisionkit.stats.error_stats over one chunk, fused into one loop.

   Per pair (a, r), both already in fp64, with s the spacing of the pair's row: the errors
       abs = |a - r|,  rel = abs / max(|r|, tiny),  ulp = abs / spacing_D(r),  sulp = abs / s
   and, over the chunk's finite pairs, their sums, maxima, a histogram of each error's top 16 bits
   (its int64 bit pattern >> 48) and the errors whose bit patterns fall in the caller's windows,
   plus the counts of the pairs that are excluded (NaN / infinity on either side).

   Every value is computed with the same IEEE operations as the torch path in stats.py, so maxima,
   histograms, counts and gathered errors are identical. spacing_D(r) is a power of two, so
   abs * (1 / spacing) is the same correctly rounded quotient as abs / spacing. Sums use
   compensated (Neumaier) addition of per-block partial sums, so they are at least as accurate as
   the torch path's, not bit-identical to them. Compile with no fast-math flags and no
   floating-point contraction. */

#include <math.h>
#include <stdint.h>
#include <string.h>

#define PK_BINS 65536
#define PK_SHIFT 48
#define PK_BLOCK 256
#define PK_LANES 4

/* Layout of the double accumulators f[]: per metric m (abs, rel, ulp, sulp) sum, compensation and
   maximum; then the three dot products, each with its compensation. */
enum { F_SUM = 0, F_COMP = 4, F_MAX = 8, F_DOT = 12, F_NORM_A = 14, F_NORM_R = 16, F_LEN = 18 };
/* Layout of the integer counts c[]. */
enum {
    C_FILLED, C_ZEROS, C_BELOW_HALF, C_TIES, C_BALANCE, C_WITHIN_1E3, C_WITHIN_5E3,
    C_NAN_MATCHED, C_INF_MATCHED, C_NAN_MISMATCH, C_INF_MISMATCH, C_LEN
};
/* lut[m * PK_BINS + bin] is 1 + the index of the window of metric m that covers histogram bin
   bin, or 0. Layout of one window's row in win[]: the metric, the key range [lo, hi), the buffer's capacity,
   how many errors it holds and whether it overflowed (then it stops gathering). */
enum { W_METRIC, W_LO, W_HI, W_CAPACITY, W_FILLED, W_DROPPED, W_LEN };

static inline uint64_t bits_of(double x) {
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline double double_of(uint64_t u) {
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Neumaier's compensated addition: *sum + *comp carries the running total. Once the sum
   overflows, the compensation stays as it was, so the total reads as the infinity. */
static inline void compensated_add(double *sum, double *comp, double x) {
    double s = *sum, t = s + x;
    if (isfinite(t))
        *comp += fabs(s) >= fabs(x) ? (s - t) + x : (x - t) + s;
    *sum = t;
}

typedef struct {
    double tiny;      /* smallest normal of the result's format */
    int64_t emin;     /* its minimum normal exponent */
    int64_t mantissa; /* its explicit mantissa bits */
} format_t;

/* Appends the n keys picked[] (all inside the window's range) to the window's buffer. Several
   threads may append to one window: each reserves its place with one atomic addition. A window
   whose buffer would overflow is marked dropped; its contents are then never read. */
static void append(int64_t *row, int64_t *buf, const int64_t *picked, int64_t n) {
    if (n == 0 || __atomic_load_n(&row[W_DROPPED], __ATOMIC_RELAXED))
        return;
    int64_t at = __atomic_fetch_add(&row[W_FILLED], n, __ATOMIC_RELAXED);
    if (at + n > row[W_CAPACITY]) {
        __atomic_store_n(&row[W_DROPPED], 1, __ATOMIC_RELAXED);
        return;
    }
    memcpy(buf + at, picked, (size_t)n * sizeof *picked);
}

/* The errors and per-block reductions of n finite pairs; s is one spacing for all of them. */
static void block(const double *a, const double *r, int64_t n, double s, const format_t *fmt, double *f,
                  int64_t *c, int64_t *hist, const int8_t *lut, int64_t *win, int64_t **bufs, int64_t n_win) {
    double v[4][PK_BLOCK];
    int64_t hit_key[PK_BLOCK], picked_key[PK_BLOCK];
    int8_t hit_slot[PK_BLOCK];
    double sum[4][PK_LANES] = {{0}};
    double dot[PK_LANES] = {0}, na[PK_LANES] = {0}, nr[PK_LANES] = {0};
    int64_t zeros = 0, below = 0, ties = 0, balance = 0, w1 = 0, w5 = 0;
    const int64_t gap_floor = fmt->emin + 1023; /* biased exponent of 2**emin */
    for (int64_t i = 0; i < n; i++) {
        double d = a[i] - r[i], e = fabs(d), ar = fabs(r[i]);
        int64_t biased = (int64_t)((bits_of(r[i]) >> 52) & 0x7FF);
        int64_t gap_exponent = (biased > gap_floor ? biased : gap_floor) - 1023 - fmt->mantissa;
        double inv_gap = double_of((uint64_t)(1023 - gap_exponent) << 52);
        double rel = e / (ar > fmt->tiny ? ar : fmt->tiny), ulp = e * inv_gap, sulp = e / s;
        int lane = (int)(i & (PK_LANES - 1));
        v[0][i] = e;
        v[1][i] = rel;
        v[2][i] = ulp;
        v[3][i] = sulp;
        sum[0][lane] += e;
        sum[1][lane] += rel;
        sum[2][lane] += ulp;
        sum[3][lane] += sulp;
        dot[lane] += a[i] * r[i];
        na[lane] += a[i] * a[i];
        nr[lane] += r[i] * r[i];
        zeros += e == 0.0;
        below += ulp < 0.5;
        ties += ulp == 0.5;
        balance += (d > 0.0) - (d < 0.0);
        w1 += rel <= 1e-3;
        w5 += rel <= 5e-3;
    }
    for (int m = 0; m < 4; m++) {
        double total = (sum[m][0] + sum[m][1]) + (sum[m][2] + sum[m][3]);
        compensated_add(&f[F_SUM + m], &f[F_COMP + m], total);
        double top = f[F_MAX + m];
        int64_t *h = hist + (int64_t)m * PK_BINS;
        const int8_t *slots = lut + (int64_t)m * PK_BINS;
        int64_t hits = 0; /* keys in bins that belong to a window, with the window's slot */
        for (int64_t i = 0; i < n; i++) {
            double x = v[m][i];
            top = x > top ? x : top; /* inf > top holds; NaN never occurs (both sides finite) */
            int64_t key = (int64_t)bits_of(x), bin = key >> PK_SHIFT;
            h[bin]++;
            hit_key[hits] = key; /* kept (hits grows) only where the bin belongs to a window */
            hit_slot[hits] = slots[bin];
            hits += slots[bin] != 0;
        }
        f[F_MAX + m] = top;
        for (int64_t w = 0; hits && w < n_win; w++) {
            int64_t *row = win + w * W_LEN, picked = 0;
            if (row[W_METRIC] != m)
                continue;
            for (int64_t i = 0; i < hits; i++) /* in the window's bins and in its exact range */
                if (hit_slot[i] == w + 1 && hit_key[i] >= row[W_LO] && hit_key[i] < row[W_HI])
                    picked_key[picked++] = hit_key[i];
            append(row, bufs[w], picked_key, picked);
        }
    }
    double prods[3] = {(dot[0] + dot[1]) + (dot[2] + dot[3]), (na[0] + na[1]) + (na[2] + na[3]),
                       (nr[0] + nr[1]) + (nr[2] + nr[3])};
    for (int j = 0; j < 3; j++)
        compensated_add(&f[F_DOT + 2 * j], &f[F_DOT + 2 * j + 1], prods[j]);
    c[C_FILLED] += n;
    c[C_ZEROS] += zeros;
    c[C_BELOW_HALF] += below;
    c[C_TIES] += ties;
    c[C_BALANCE] += balance;
    c[C_WITHIN_1E3] += w1;
    c[C_WITHIN_5E3] += w5;
}

/* Counts a pair with a NaN or an infinity on either side into c[]. */
static void count_excluded(double x, double y, int64_t *c) {
    int nan_x = isnan(x), nan_y = isnan(y);
    int inf_x = isinf(x), inf_y = isinf(y);
    if (nan_x && nan_y)
        c[C_NAN_MATCHED]++;
    else if (nan_x != nan_y)
        c[C_NAN_MISMATCH]++;
    if (inf_x && inf_y && x == y)
        c[C_INF_MATCHED]++;
    else if ((inf_x || inf_y) && !(nan_x || nan_y))
        c[C_INF_MISMATCH]++;
}

/* One chunk of k pairs. Pair i's spacing is spacing[i / seg_len]. Returns the number of pairs
   whose ULP error is exactly 0.5 (ties), which the caller decides by rounding. */
int64_t pk_first_pass(const double *a, const double *r, int64_t k, const double *spacing, int64_t seg_len,
                      double tiny, int64_t emin, int64_t mantissa, double *f, int64_t *c, int64_t *hist,
                      const int8_t *lut, int64_t *win, int64_t **bufs, int64_t n_win) {
    format_t fmt = {tiny, emin, mantissa};
    double ta[PK_BLOCK], tr[PK_BLOCK];
    int64_t ties_before = c[C_TIES];
    for (int64_t seg = 0; seg < k; seg += seg_len) {
        int64_t seg_end = seg + seg_len < k ? seg + seg_len : k;
        double s = spacing[seg / seg_len];
        for (int64_t start = seg; start < seg_end; start += PK_BLOCK) {
            int64_t n = seg_end - start < PK_BLOCK ? seg_end - start : PK_BLOCK;
            const double *pa = a + start, *pr = r + start;
            int finite = 1;
            for (int64_t i = 0; i < n; i++)
                finite &= isfinite(pa[i]) & isfinite(pr[i]);
            if (!finite) { /* keep the finite pairs, count the others */
                int64_t kept = 0;
                for (int64_t i = 0; i < n; i++) {
                    if (isfinite(pa[i]) && isfinite(pr[i])) {
                        ta[kept] = pa[i];
                        tr[kept++] = pr[i];
                    } else {
                        count_excluded(pa[i], pr[i], c);
                    }
                }
                pa = ta;
                pr = tr;
                n = kept;
            }
            if (n)
                block(pa, pr, n, s, &fmt, f, c, hist, lut, win, bufs, n_win);
        }
    }
    return c[C_TIES] - ties_before;
}

/* out[j] = the largest finite |r| of row j (0 where the row has none), for n_rows rows of
   row_len fp64 values: the scale that the scale-aware ULP error divides by. */
void pk_row_scales(const double *r, int64_t n_rows, int64_t row_len, double *out) {
    for (int64_t j = 0; j < n_rows; j++) {
        const double *row = r + j * row_len;
        double top = 0.0;
        for (int64_t i = 0; i < row_len; i++) {
            double x = fabs(row[i]);
            top = (x > top && isfinite(x)) ? x : top;
        }
        out[j] = top;
    }
}
