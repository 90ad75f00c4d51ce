// litlab::tiled_matmul, CPU kernel: C = A @ B for 2-D or batched 3-D tensors of any strides.
//
// The loop structure of BLIS/GotoBLAS, in portable C++:
//   C is split into one block per thread (OpenMP, through at::parallel_for: the pool that
//   torch.set_num_threads sizes), or whole products per thread for batches; in each:
//   for each NC-wide column panel of B, for each KC-deep slice of K:
//     pack B[kc x nc] into NR-wide micro-panels (contiguous, zero-padded)
//     for each MC-row block of A: pack it into MR-tall micro-panels
//       micro-kernel: an MR x NR block of C kept in vector registers for the whole KC loop.
// Packing makes every inner load contiguous and aligned whatever the input strides (transposed
// weights, batch-broadcast views), and it converts bf16 to float once per element instead of once
// per multiply-add. The micro-kernel uses GCC/Clang vector extensions: the compiler emits one
// FMA per vector (AVX-512, AVX2+FMA or NEON, from -march=native), no intrinsics to maintain.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>

namespace {

#if defined(__AVX512F__)
constexpr int kVecBytes = 64;
#elif defined(__AVX__)
constexpr int kVecBytes = 32;
#else
constexpr int kVecBytes = 16;
#endif

template <typename T>
struct Vec {
  typedef T type __attribute__((vector_size(kVecBytes)));
};

// Register block: MR rows x NV vectors of C. AVX-512 (32 registers): 12 x 2 = 24 accumulators
// + 2 B vectors + 1 broadcast A value; AVX2/NEON (16): 6 x 2 = 12 + 3, 15 of the 16. KC: a B
// micro-panel (KC x NR) stays in L1; MC x KC block of A in L2; NC x KC panel of B in L3.
#if defined(__AVX512F__)
constexpr int MR = 12;
#else
constexpr int MR = 6;
#endif
constexpr int NV = 2;
constexpr int64_t KC = 256;
constexpr int64_t MC = 144;
constexpr int64_t NC = 3072;

template <typename T>
constexpr int lanes() { return kVecBytes / sizeof(T); }

template <typename T>
constexpr int nr() { return NV * lanes<T>(); }

// All lanes = x, as one broadcast instruction. (`V{} + x` would keep an add of 0.0 before it:
// without -ffast-math the compiler must, since -0.0 + 0.0 is +0.0; x - 0.0 is x for every x, so
// the subtraction folds away.)
template <typename V, typename T>
inline V splat(T x) {
  return x - V{};
}

// C[0:mr, 0:nr] (=, for the first K slice, else +=) Ap (KC x MR, packed) @ Bp (KC x NR, packed).
template <typename T>
inline void micro_kernel(int64_t kc, const T* __restrict ap, const T* __restrict bp,
                         T* __restrict c, int64_t ldc, int mr, int n_cols, bool first) {
  using V = typename Vec<T>::type;
  constexpr int L = lanes<T>();
  constexpr int NR = nr<T>();
  V acc[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = V{};
  for (int64_t p = 0; p < kc; ++p) {
    V bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = *reinterpret_cast<const V*>(bp + p * NR + v * L);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const V av = splat<V>(ap[p * MR + i]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] += av * bv[v];
    }
  }
  if (mr == MR && n_cols == NR) {
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        V cv = acc[i][v];
        if (!first) {  // C is written once per K slice: no zero-fill pass before the first
          V old;
          std::memcpy(&old, c + i * ldc + v * L, sizeof(V));
          cv += old;
        }
        std::memcpy(c + i * ldc + v * L, &cv, sizeof(V));
      }
  } else {  // an edge tile: through a buffer, only the valid part is written
    alignas(64) T buf[MR][NR];
    std::memcpy(buf, acc, sizeof(buf));
    for (int i = 0; i < mr; ++i)
      for (int j = 0; j < n_cols; ++j) c[i * ldc + j] = first ? buf[i][j] : c[i * ldc + j] + buf[i][j];
  }
}

// dst (panels of `width` rows of src, each stored k-major: dst[p * width + r]) <- src[rows, k],
// converted to the accumulator type and zero-padded to whole panels. `rs`, `ks`: strides of a
// row and of a k step in src.
template <typename S, typename T>
void pack(const S* src, int64_t rs, int64_t ks, int64_t rows, int64_t depth, int width, T* dst) {
  const int64_t panels = (rows + width - 1) / width;
  for (int64_t q = 0; q < panels; ++q) {
    T* out = dst + q * depth * width;
    const int64_t r0 = q * width;
    const int live = static_cast<int>(std::min<int64_t>(width, rows - r0));
    if (ks == 1 && live == width) {  // k contiguous in src: walk each row, scatter by width
      for (int r = 0; r < width; ++r) {
        const S* s = src + (r0 + r) * rs;
        for (int64_t p = 0; p < depth; ++p) out[p * width + r] = static_cast<T>(s[p]);
      }
    } else {  // rows contiguous (or any other stride): walk k, gather a panel's row per k
      for (int64_t p = 0; p < depth; ++p) {
        const S* s = src + p * ks + r0 * rs;
        T* o = out + p * width;
        for (int r = 0; r < live; ++r) o[r] = static_cast<T>(s[r * rs]);
        for (int r = live; r < width; ++r) o[r] = T(0);
      }
    }
  }
}

// The operands of one product: c (m x n, row-major, leading dimension ldc) += a (m x k) @ b
// (k x n), a and b of any strides.
template <typename S, typename T>
struct Problem {
  const S* a;
  int64_t a_rs, a_ks;
  const S* b;
  int64_t b_ks, b_cs;
  T* c;
  int64_t ldc, m, n, k;

  Problem sub(int64_t r0, int64_t rows, int64_t c0, int64_t cols) const {  // a block of C
    return {a + r0 * a_rs, a_rs, a_ks, b + c0 * b_cs, b_ks, b_cs, c + r0 * ldc + c0, ldc,
            rows, cols, k};
  }
};

// Packed-buffer sizes of one thread (elements of T) for a product of these sizes.
template <typename T>
int64_t pack_elems(int64_t m, int64_t n, int64_t k) {
  const int64_t kc = std::min(KC, k), mc = std::min(MC, (m + MR - 1) / MR * MR);
  const int64_t nc = std::min(NC, (n + nr<T>() - 1) / nr<T>() * nr<T>());
  return (mc + nc) * kc + 64 / sizeof(T);
}

// One thread's product, the BLIS loop nest: B's NC x KC panel packed (L3), A's MC x KC block
// packed (L2), then each NR-wide micro-panel of B (L1) against every MR-row panel of the block.
template <typename S, typename T>
void gemm(const Problem<S, T>& p, T* buffer) {
  constexpr int NR = nr<T>();
  T* b_pack = buffer;
  T* a_pack = buffer + std::min(NC, (p.n + NR - 1) / NR * NR) * std::min(KC, p.k);
  for (int64_t jc = 0; jc < p.n; jc += NC) {
    const int64_t nc = std::min(NC, p.n - jc);
    for (int64_t pc = 0; pc < p.k; pc += KC) {
      const int64_t kc = std::min(KC, p.k - pc);
      // B^T: its rows are B's columns, its k steps B's rows
      pack<S, T>(p.b + pc * p.b_ks + jc * p.b_cs, p.b_cs, p.b_ks, nc, kc, NR, b_pack);
      for (int64_t ic = 0; ic < p.m; ic += MC) {
        const int64_t mc = std::min(MC, p.m - ic);
        pack<S, T>(p.a + ic * p.a_rs + pc * p.a_ks, p.a_rs, p.a_ks, mc, kc, MR, a_pack);
        for (int64_t j = 0; j < nc; j += NR) {  // one B micro-panel stays in L1 ...
          const int cols = static_cast<int>(std::min<int64_t>(NR, nc - j));
          for (int64_t ir = 0; ir < mc; ir += MR) {  // ... while the A block streams from L2
            const int rows = static_cast<int>(std::min<int64_t>(MR, mc - ir));
            micro_kernel<T>(kc, a_pack + ir * kc, b_pack + j * kc,
                            p.c + (ic + ir) * p.ldc + jc + j, p.ldc, rows, cols, pc == 0);
          }
        }
      }
    }
  }
}

// Split C into `threads` blocks (rows x columns, as square as the factors of `threads` allow,
// on micro-tile boundaries) and run one independent product per block and thread: one parallel
// region per call and no barrier inside it. Each thread packs the parts of A and B its block
// needs (a few blocks pack the same panel twice: O(n^2) copies against O(n^3) arithmetic), which
// is cheaper than the synchronisation of shared packs on a machine busier than its cores.
template <typename S, typename T>
void parallel_gemm(const Problem<S, T>& p, int64_t threads) {
  constexpr int NR = nr<T>();
  const int64_t row_units = (p.m + MR - 1) / MR, col_units = (p.n + NR - 1) / NR;
  int64_t best_r = 1;
  double best = -1;
  for (int64_t r = 1; r <= threads; ++r) {  // rows x cols == threads, squarest blocks
    if (threads % r || r > row_units || threads / r > col_units) continue;
    const double h = double(p.m) / r, w = double(p.n) / (threads / r);
    const double score = std::min(h, w) / std::max(h, w);
    if (score > best) best = score, best_r = r;
  }
  if (best < 0) threads = 1;  // too small to split evenly
  const int64_t split_r = best < 0 ? 1 : best_r, split_c = threads / split_r;
  const int64_t rows_per = (row_units + split_r - 1) / split_r * MR;
  const int64_t cols_per = (col_units + split_c - 1) / split_c * NR;
  const int64_t per_thread = pack_elems<T>(rows_per, cols_per, p.k);
  at::Tensor buffers = at::empty({threads * per_thread},
                                 at::TensorOptions().dtype(c10::CppTypeToScalarType<T>::value));
  T* base = buffers.mutable_data_ptr<T>();
  at::parallel_for(0, threads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t r0 = (t / split_c) * rows_per, c0 = (t % split_c) * cols_per;
      if (r0 >= p.m || c0 >= p.n) continue;
      const auto block = p.sub(r0, std::min(rows_per, p.m - r0), c0, std::min(cols_per, p.n - c0));
      // each thread's buffer starts on a 64-byte boundary
      T* buf = base + t * per_thread;
      buf += ((64 - reinterpret_cast<uintptr_t>(buf) % 64) % 64) / sizeof(T);
      gemm<S, T>(block, buf);
    }
  });
}

template <typename S, typename T>
void batched(const at::Tensor& a, const at::Tensor& b, at::Tensor& c) {  // c: contiguous
  const int64_t batch = a.size(0), m = a.size(1), k = a.size(2), n = b.size(2);
  const S* ap = a.const_data_ptr<S>();
  const S* bp = b.const_data_ptr<S>();
  T* cp = c.mutable_data_ptr<T>();
  auto problem = [&](int64_t i) {
    return Problem<S, T>{ap + i * a.stride(0), a.stride(1), a.stride(2), bp + i * b.stride(0),
                         b.stride(1), b.stride(2), cp + i * m * n, n, m, n, k};
  };
  const int64_t threads = at::get_num_threads();
  // a few microseconds of work (a small layer's product) is not worth waking the threads
  const bool small = m * n * k < (int64_t(1) << 18);
  if (batch >= threads || small) {  // whole products per thread
    const int64_t per = pack_elems<T>(m, n, k);
    at::parallel_for(0, batch, small ? batch : 1, [&](int64_t begin, int64_t end) {
      at::Tensor buffer = at::empty({per}, c.options());
      T* buf = buffer.mutable_data_ptr<T>();
      buf += ((64 - reinterpret_cast<uintptr_t>(buf) % 64) % 64) / sizeof(T);
      for (int64_t i = begin; i < end; ++i) gemm<S, T>(problem(i), buf);
    });
  } else {  // fewer products than threads: each product split across them
    for (int64_t i = 0; i < batch; ++i) parallel_gemm<S, T>(problem(i), threads);
  }
}

at::Tensor tiled_matmul_cpu(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.device().is_cpu() && b.device().is_cpu(), "tiled_matmul_cpu: CPU tensors only");
  TORCH_CHECK(a.dim() == b.dim() && (a.dim() == 2 || a.dim() == 3),
              "tiled_matmul_cpu: two 2-D or two 3-D tensors, got ", a.sizes(), " and ", b.sizes());
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "tiled_matmul_cpu: dtypes differ");
  const bool flat = a.dim() == 2;
  const at::Tensor a3 = flat ? a.unsqueeze(0) : a;
  const at::Tensor b3 = flat ? b.unsqueeze(0) : b;
  TORCH_CHECK(a3.size(0) == b3.size(0) && a3.size(2) == b3.size(1),
              "tiled_matmul_cpu: shapes do not match: ", a.sizes(), " @ ", b.sizes());
  const auto dtype = a.scalar_type();
  const auto acc_dtype = dtype == at::kDouble ? at::kDouble : at::kFloat;
  const auto opts = a.options().dtype(acc_dtype);
  at::Tensor c = flat ? at::empty({a.size(0), b.size(1)}, opts)
                      : at::empty({a.size(0), a.size(1), b.size(2)}, opts);
  if (a3.size(2) == 0) return c.zero_().to(dtype);  // no K slice writes C: an empty sum is 0
  if (dtype == at::kFloat) {
    batched<float, float>(a3, b3, c);
  } else if (dtype == at::kDouble) {
    batched<double, double>(a3, b3, c);
  } else if (dtype == at::kBFloat16) {
    batched<at::BFloat16, float>(a3, b3, c);  // float accumulators, rounded once at the end
  } else {
    TORCH_CHECK(false, "tiled_matmul_cpu: float32, float64 or bfloat16, got ", dtype);
  }
  if (acc_dtype != dtype) c = c.to(dtype);
  return c;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(litlab_kernels, m) {
  m.def("tiled_matmul_cpu(Tensor a, Tensor b) -> Tensor");
}

TORCH_LIBRARY_IMPL(litlab_kernels, CPU, m) {
  m.impl("tiled_matmul_cpu", &tiled_matmul_cpu);
}
