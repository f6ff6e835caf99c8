/* The torch engine's CPU kernels (see kernels.py, which compiles this file at first use and
   loads it with ctypes): latency mode's sparse-input product, and the single-stream decode step
   built on it. Linked against the OpenMP runtime torch loaded, so its threads are torch's. */
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>

/* bfloat16 -> float32: the bf16 bits are the float's top half */
static inline float bf16_f32(uint16_t u) {
  uint32_t v = (uint32_t)u << 16;
  float f;
  memcpy(&f, &v, sizeof f);
  return f;
}

/* acc[0:n_out] += x[idx[k]] * w[idx[k], :] for k in [a, b): whole rows front to back, four rows
   per pass over acc. W is W_T (float) or uint16_t (bfloat16 bits, converted as read). */
#define ROWS_INTO(W_T, CONV)                                                              \
  do {                                                                                    \
    const W_T *restrict w_ = (const W_T *)wt;                                             \
    int k = a;                                                                            \
    for (; k + 3 < b; k += 4) {                                                           \
      const W_T *restrict r0 = w_ + (long)idx[k] * n_out;                                 \
      const W_T *restrict r1 = w_ + (long)idx[k + 1] * n_out;                             \
      const W_T *restrict r2 = w_ + (long)idx[k + 2] * n_out;                             \
      const W_T *restrict r3 = w_ + (long)idx[k + 3] * n_out;                             \
      float x0 = x[idx[k]], x1 = x[idx[k + 1]], x2 = x[idx[k + 2]], x3 = x[idx[k + 3]];   \
      for (int j = 0; j < n_out; j++)                                                     \
        acc[j] += x0 * CONV(r0[j]) + x1 * CONV(r1[j]) + x2 * CONV(r2[j]) + x3 * CONV(r3[j]); \
    }                                                                                     \
    for (; k < b; k++) {                                                                  \
      const W_T *restrict r0 = w_ + (long)idx[k] * n_out;                                 \
      float x0 = x[idx[k]];                                                               \
      for (int j = 0; j < n_out; j++) acc[j] += x0 * CONV(r0[j]);                         \
    }                                                                                     \
  } while (0)

#define AS_IS(v) (v)

/* out[0:n_out] = sum over i with |x[i]| > t of x[i] * wt[i, :]; returns how
   many i passed. wt is n_in x n_out, row-major, float32 or (bf16 != 0) bfloat16. The passing
   rows are split between the threads, so each reads whole rows front to back; the partial
   sums are added at the end, each thread a slice of the outputs. idx holds n_in ints, part
   omp_get_max_threads() * stride floats (stride >= n_out, a multiple of 16). */
static int gemv_t(const void *restrict wt, int bf16, int n_in, int n_out,
                  const float *restrict x, float t, float *restrict out, int *restrict idx,
                  float *restrict part, int stride) {
  int na = 0;
  for (int i = 0; i < n_in; i++)
    if (fabsf(x[i]) > t) idx[na++] = i;
  #pragma omp parallel
  {
    int nt = omp_get_num_threads(), id = omp_get_thread_num();
    int a = (int)((long)na * id / nt), b = (int)((long)na * (id + 1) / nt);
    float *restrict acc = part + (size_t)id * stride;
    memset(acc, 0, sizeof(float) * n_out);
    if (bf16)
      ROWS_INTO(uint16_t, bf16_f32);
    else
      ROWS_INTO(float, AS_IS);
    #pragma omp barrier
    int lo = (int)((long)n_out * id / nt), hi = (int)((long)n_out * (id + 1) / nt);
    for (int j = lo; j < hi; j++) {
      float s = 0.0f;
      for (int p = 0; p < nt; p++) s += part[(size_t)p * stride + j];
      out[j] = s;
    }
  }
  return na;
}

static int stride_of(int n) { return (n + 15) & ~15; }

int zl_sparse_input_gemv(const void *restrict wt, int bf16, int n_in, int n_out,
                         const float *restrict x, float t, float *restrict out) {
  int stride = stride_of(n_out);
  int *idx = malloc(sizeof(int) * (n_in > 0 ? n_in : 1));
  float *part = aligned_alloc(64, sizeof(float) * (size_t)omp_get_max_threads() * stride);
  if (idx == NULL || part == NULL) {
    free(idx);
    free(part);
    return -1;
  }
  int na = gemv_t(wt, bf16, n_in, n_out, x, t, out, idx, part, stride);
  free(part);
  free(idx);
  return na;
}

/* One decoder layer's weights for zl_decode_one: projections transposed (in x out; q/k/v fused
   as q|k|v, gate/up fused as gate|up; float32, or bfloat16 when bf16 != 0), the input threshold
   of each (0: every nonzero input), the MLP width, and the keys and values of the sequence's
   cache slot ([kv_heads, capacity, head_dim] each, rows `capacity` apart per head). */
typedef struct {
  const float *in_norm, *post_norm;
  const void *qkv, *o, *gate_up, *down;
  float t_qkv, t_o, t_gate_up, t_down;
  int width, bf16;
  float *k, *v;
} zl_layer;

/* zl_layer's layout as this compiler lays it out: its size, then each field's offset in
   declaration order. kernels.py checks its ctypes mirror against it at load. */
int zl_layer_layout(long *out, int n) {
  const long v[] = {
    (long)sizeof(zl_layer),
    (long)offsetof(zl_layer, in_norm), (long)offsetof(zl_layer, post_norm),
    (long)offsetof(zl_layer, qkv), (long)offsetof(zl_layer, o),
    (long)offsetof(zl_layer, gate_up), (long)offsetof(zl_layer, down),
    (long)offsetof(zl_layer, t_qkv), (long)offsetof(zl_layer, t_o),
    (long)offsetof(zl_layer, t_gate_up), (long)offsetof(zl_layer, t_down),
    (long)offsetof(zl_layer, width), (long)offsetof(zl_layer, bf16),
    (long)offsetof(zl_layer, k), (long)offsetof(zl_layer, v),
  };
  int count = (int)(sizeof(v) / sizeof(v[0]));
  for (int i = 0; i < n && i < count; i++) out[i] = v[i];
  return count;
}

static void rms(const float *restrict x, const float *restrict w, int n, float eps,
                float *restrict out) {
  float ss = 0.0f;
  for (int i = 0; i < n; i++) ss += x[i] * x[i];
  float r = 1.0f / sqrtf(ss / n + eps);
  for (int i = 0; i < n; i++) out[i] = w[i] * (x[i] * r);
}

/* latency mode's counters: only thresholded inputs count */
static void count(int passed, int n_in, float t, long *all_passed, long *all_seen) {
  if (t > 0.0f) {
    *all_passed += passed;
    *all_seen += n_in;
  }
}

static void rotate(float *restrict x, const float *restrict c, const float *restrict s, int d) {
  int half = d / 2;
  for (int i = 0; i < half; i++) {
    float a = x[i], b = x[i + half];
    x[i] = a * c[i] - b * s[i];
    x[i + half] = b * c[i + half] + a * s[i + half];
  }
}

/* One token of one sequence through every layer (the engine's single-stream decode step):
   x [hidden] is the token's embedding on entry and the last layer's output on exit; the token's
   keys and values are written at `pos` of each layer's cache slot; cos and sin are the rotary
   tables' row for `pos`. counts[0] += thresholded inputs that passed, counts[1] += thresholded
   inputs seen.
   Returns 0, or -1 when a buffer could not be allocated. */
int zl_decode_one(const zl_layer *layers, int n_layers, int hidden, int heads, int kv_heads,
                  int head_dim, int capacity, int pos, float eps, const float *cos,
                  const float *sin, float *x, long *counts) {
  int qkv_out = (heads + 2 * kv_heads) * head_dim, q_size = heads * head_dim;
  int wmax = 1;
  for (int l = 0; l < n_layers; l++) wmax = layers[l].width > wmax ? layers[l].width : wmax;
  int nmax = qkv_out > 2 * wmax ? qkv_out : 2 * wmax;
  nmax = nmax > hidden ? nmax : hidden;
  int stride = stride_of(nmax);
  int inmax = wmax > hidden ? wmax : hidden;
  inmax = inmax > q_size ? inmax : q_size;
  int *idx = malloc(sizeof(int) * inmax);
  float *part = aligned_alloc(64, sizeof(float) * (size_t)omp_get_max_threads() * stride);
  float *buf = malloc(sizeof(float) * ((size_t)hidden * 2 + qkv_out + q_size + 3 * wmax
                                       + (size_t)heads * (pos + 1)));
  if (idx == NULL || part == NULL || buf == NULL) {
    free(idx);
    free(part);
    free(buf);
    return -1;
  }
  float *h = buf, *tmp = h + hidden, *qkv = tmp + hidden, *att = qkv + qkv_out;
  float *gu = att + q_size, *act = gu + 2 * wmax, *scores = act + wmax;
  int group = heads / kv_heads;
  float scale = 1.0f / sqrtf((float)head_dim);
  long passed = 0, seen = 0;
  for (int l = 0; l < n_layers; l++) {
    const zl_layer *L = layers + l;
    rms(x, L->in_norm, hidden, eps, h);
    count(gemv_t(L->qkv, L->bf16, hidden, qkv_out, h, L->t_qkv, qkv, idx, part, stride), hidden,
          L->t_qkv, &passed, &seen);
    for (int hd = 0; hd < heads + kv_heads; hd++) rotate(qkv + hd * head_dim, cos, sin, head_dim);
    const float *kq = qkv + q_size, *vq = kq + kv_heads * head_dim;
    for (int g = 0; g < kv_heads; g++) {
      memcpy(L->k + ((size_t)g * capacity + pos) * head_dim, kq + g * head_dim,
             sizeof(float) * head_dim);
      memcpy(L->v + ((size_t)g * capacity + pos) * head_dim, vq + g * head_dim,
             sizeof(float) * head_dim);
    }
    #pragma omp parallel for schedule(static)
    for (int hd = 0; hd < heads; hd++) {
      const float *q = qkv + hd * head_dim;
      const float *kb = L->k + (size_t)(hd / group) * capacity * head_dim;
      const float *vb = L->v + (size_t)(hd / group) * capacity * head_dim;
      float *sc = scores + (size_t)hd * (pos + 1), *o = att + hd * head_dim;
      float m = -INFINITY;
      for (int t = 0; t <= pos; t++) {
        const float *kr = kb + (size_t)t * head_dim;
        float d = 0.0f;
        for (int j = 0; j < head_dim; j++) d += q[j] * kr[j];
        sc[t] = d * scale;
        m = sc[t] > m ? sc[t] : m;
      }
      float z = 0.0f;
      for (int t = 0; t <= pos; t++) {
        sc[t] = expf(sc[t] - m);
        z += sc[t];
      }
      for (int j = 0; j < head_dim; j++) o[j] = 0.0f;
      for (int t = 0; t <= pos; t++) {
        const float *vr = vb + (size_t)t * head_dim;
        float p = sc[t] / z;
        for (int j = 0; j < head_dim; j++) o[j] += p * vr[j];
      }
    }
    count(gemv_t(L->o, L->bf16, q_size, hidden, att, L->t_o, tmp, idx, part, stride), q_size,
          L->t_o, &passed, &seen);
    for (int i = 0; i < hidden; i++) x[i] += tmp[i];
    rms(x, L->post_norm, hidden, eps, h);
    int w = L->width;
    count(gemv_t(L->gate_up, L->bf16, hidden, 2 * w, h, L->t_gate_up, gu, idx, part, stride),
          hidden, L->t_gate_up, &passed, &seen);
    for (int i = 0; i < w; i++) {
      float g = gu[i];
      act[i] = g / (1.0f + expf(-g)) * gu[w + i];
    }
    count(gemv_t(L->down, L->bf16, w, hidden, act, L->t_down, tmp, idx, part, stride), w, L->t_down,
          &passed, &seen);
    for (int i = 0; i < hidden; i++) x[i] += tmp[i];
  }
  counts[0] += passed;
  counts[1] += seen;
  free(buf);
  free(part);
  free(idx);
  return 0;
}
