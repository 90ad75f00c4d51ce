// litlab::tiled_matmul, CPU kernel: C = A @ B for 2-D or batched 3-D tensors of any strides.
//
// The loop structure of BLIS/GotoBLAS, in portable C++:
//   for each NC-wide column panel of B, for each KC-deep slice of K:
//     pack B[kc x nc] into NR-wide micro-panels (contiguous, zero-padded), shared by all threads
//     pack A[mc x kc] into MR-tall micro-panels
//     over tiles (an MC-row block x a range of micro-panels of B), in parallel (OpenMP, through
//     at::parallel_for, the pool torch.set_num_threads sizes):
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

// Register block: MR rows x NV vectors of C (6 x 2 = 12 accumulators, + 2 B vectors + 1 broadcast
// A value: 15 of the 16 AVX2 registers); KC: B micro-panel of KC x NR in L1; MC x KC block of A
// in L2; NC x KC panel of B in L3.
constexpr int MR = 6;
constexpr int NV = 2;
constexpr int64_t KC = 256;
constexpr int64_t MC = 144;
constexpr int64_t NC = 3072;
constexpr int64_t MO = 8192;  // rows of A packed at once (bounds the buffer: MO x KC)

template <typename T>
constexpr int lanes() { return kVecBytes / sizeof(T); }

template <typename T>
constexpr int nr() { return NV * lanes<T>(); }

// C[0:mr, 0:nr] += Ap (KC x MR, packed) @ Bp (KC x NR, packed).
template <typename T>
inline void micro_kernel(int64_t kc, const T* __restrict ap, const T* __restrict bp,
                         T* __restrict c, int64_t ldc, int mr, int n_cols) {
  using V = typename Vec<T>::type;
  constexpr int L = lanes<T>();
  constexpr int NR = nr<T>();
  V acc[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = V{};
  for (int64_t p = 0; p < kc; ++p) {
    V bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = *reinterpret_cast<const V*>(bp + p * NR + v * L);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const V av = V{} + ap[p * MR + i];  // broadcast
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] += av * bv[v];
    }
  }
  if (mr == MR && n_cols == NR) {
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        V cv;
        std::memcpy(&cv, c + i * ldc + v * L, sizeof(V));
        cv += acc[i][v];
        std::memcpy(c + i * ldc + v * L, &cv, sizeof(V));
      }
  } else {  // an edge tile: through a buffer, only the valid part is written
    alignas(64) T buf[MR][NR];
    std::memcpy(buf, acc, sizeof(buf));
    for (int i = 0; i < mr; ++i)
      for (int j = 0; j < n_cols; ++j) c[i * ldc + j] += buf[i][j];
  }
}

// dst (panels of `width` rows of src, each stored k-major: dst[p * width + r]) <- src[rows, k],
// converted to the accumulator type and zero-padded to whole panels. `rs`, `ks`: strides of a
// row and of a k step in src.
template <typename S, typename T>
void pack(const S* src, int64_t rs, int64_t ks, int64_t rows, int64_t depth, int width, T* dst) {
  const int64_t panels = (rows + width - 1) / width;
  // small packs stay on the calling thread: a parallel region's start and barrier cost more
  // than copying a few tens of kB (and far more on a machine busier than its cores)
  const int64_t grain = std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(1, depth * width));
  at::parallel_for(0, panels, grain, [&](int64_t begin, int64_t end) {
    for (int64_t q = begin; q < end; ++q) {
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
  });
}

// C[0:mb, 0:nc] += packed A (mb x kc) @ packed B (kc x nc), tile by tile across the threads.
template <typename T>
void tiles(const T* a_pack, const T* b_pack, T* c, int64_t ldc, int64_t mb, int64_t nc,
           int64_t kc) {
  constexpr int NR = nr<T>();
  const int64_t n_panels = (nc + NR - 1) / NR;
  const int64_t n_ic = (mb + MC - 1) / MC;
  // enough tiles for every thread even when m is small: split B's panels too
  const int64_t threads = at::get_num_threads();
  const int64_t splits =
      std::min<int64_t>(n_panels, std::max<int64_t>(1, (2 * threads + n_ic - 1) / n_ic));
  const int64_t per_tile = (n_panels + splits - 1) / splits;
  // a few microseconds of work (a small layer's product) is not worth waking the threads
  const int64_t grain = mb * nc * kc < (1 << 18) ? n_ic * splits : 1;
  at::parallel_for(0, n_ic * splits, grain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t ic = (t / splits) * MC;
      const int64_t mc = std::min(MC, mb - ic);
      const int64_t q0 = (t % splits) * per_tile;
      const int64_t q1 = std::min(n_panels, q0 + per_tile);
      for (int64_t q = q0; q < q1; ++q) {  // one B micro-panel stays in L1 ...
        const int64_t j = q * NR;
        const int cols = static_cast<int>(std::min<int64_t>(NR, nc - j));
        for (int64_t ir = 0; ir < mc; ir += MR) {  // ... while the A block streams from L2
          const int rows = static_cast<int>(std::min<int64_t>(MR, mc - ir));
          micro_kernel<T>(kc, a_pack + (ic + ir) * kc, b_pack + q * kc * NR,
                          c + (ic + ir) * ldc + j, ldc, rows, cols);
        }
      }
    }
  });
}

// c (m x n, row-major, leading dimension ldc, accumulated into) += a (m x k) @ b (k x n).
template <typename S, typename T>
void gemm(const S* a, int64_t a_rs, int64_t a_ks, const S* b, int64_t b_ks, int64_t b_cs,
          T* c, int64_t ldc, int64_t m, int64_t n, int64_t k, T* a_pack, T* b_pack) {
  for (int64_t jc = 0; jc < n; jc += NC) {
    const int64_t nc = std::min(NC, n - jc);
    for (int64_t pc = 0; pc < k; pc += KC) {
      const int64_t kc = std::min(KC, k - pc);
      // B^T: its rows are B's columns, its k steps B's rows
      pack<S, T>(b + pc * b_ks + jc * b_cs, b_cs, b_ks, nc, kc, nr<T>(), b_pack);
      for (int64_t mo = 0; mo < m; mo += MO) {
        const int64_t mb = std::min(MO, m - mo);
        pack<S, T>(a + mo * a_rs + pc * a_ks, a_rs, a_ks, mb, kc, MR, a_pack);
        tiles<T>(a_pack, b_pack, c + mo * ldc + jc, ldc, mb, nc, kc);
      }
    }
  }
}

template <typename S, typename T>
void batched(const at::Tensor& a, const at::Tensor& b, at::Tensor& c) {  // c: contiguous
  const int64_t batch = a.size(0), m = a.size(1), k = a.size(2), n = b.size(2);
  constexpr int NR = nr<T>();
  const int64_t m_pad = (std::min(MO, m) + MR - 1) / MR * MR;
  const int64_t nc_pad = (std::min(NC, n) + NR - 1) / NR * NR;
  const auto opts = c.options();
  // packed panels: 64-byte aligned by torch's CPU allocator
  at::Tensor a_pack = at::empty({m_pad * std::min(KC, k)}, opts);
  at::Tensor b_pack = at::empty({nc_pad * std::min(KC, k)}, opts);
  const S* ap = a.const_data_ptr<S>();
  const S* bp = b.const_data_ptr<S>();
  T* cp = c.mutable_data_ptr<T>();
  for (int64_t i = 0; i < batch; ++i)
    gemm<S, T>(ap + i * a.stride(0), a.stride(1), a.stride(2), bp + i * b.stride(0), b.stride(1),
               b.stride(2), cp + i * m * n, n, m, n, k, a_pack.mutable_data_ptr<T>(),
               b_pack.mutable_data_ptr<T>());
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
  at::Tensor c = flat ? at::zeros({a.size(0), b.size(1)}, a.options().dtype(acc_dtype))
                      : at::zeros({a.size(0), a.size(1), b.size(2)}, a.options().dtype(acc_dtype));
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
