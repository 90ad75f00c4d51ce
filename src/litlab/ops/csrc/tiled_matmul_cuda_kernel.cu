// litlab::tiled_matmul, CUDA kernel: the shared-memory tiled matmul of the classic tutorial,
// written for any shape. Plain CUDA (no torch headers), so it compiles alone with nvcc
// (tests/test_ops.py does that where nvcc exists); tiled_matmul_cuda.cpp binds it to torch.
//
// A block of 16 x 16 threads computes a 64 x 64 tile of C, each thread a 4 x 4 register block
// (16 outputs per thread: each shared-memory value read feeds 4 multiply-adds). K is walked in
// steps of 16: the block stages a 64 x 16 tile of A and a 16 x 64 tile of B in shared memory.
// Loads are coalesced: consecutive threads read consecutive addresses of the row-major inputs
// (along K for A, along N for B). Out-of-range elements load as zero and are never stored, so M,
// N and K need not be multiples of anything. Accumulators are float (double for double inputs).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace litlab {

constexpr int BM = 64, BN = 64, BK = 16, TM = 4, TN = 4;
constexpr int THREADS = (BM / TM) * (BN / TN);  // 256

template <typename T> struct Acc { using type = float; };
template <> struct Acc<double> { using type = double; };

template <typename T> __device__ __forceinline__ typename Acc<T>::type widen(T v) {
  return static_cast<typename Acc<T>::type>(v);
}
template <> __device__ __forceinline__ float widen(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T, typename A> __device__ __forceinline__ T narrow(A v) { return static_cast<T>(v); }
template <> __device__ __forceinline__ __nv_bfloat16 narrow(float v) { return __float2bfloat16(v); }

// A: batch x M x K, B: batch x K x N, C: batch x M x N, all contiguous (row-major).
template <typename T>
__global__ void __launch_bounds__(THREADS)
tiled_matmul_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ c,
                    int64_t m, int64_t n, int64_t k) {
  using AccT = typename Acc<T>::type;
  // As is stored transposed (k-major) so the compute loop reads TM consecutive rows; +1 column
  // of padding keeps the transposing stores free of bank conflicts
  __shared__ AccT as[BK][BM + 1];
  __shared__ AccT bs[BK][BN];

  const int tid = threadIdx.x;
  const int tx = tid % (BN / TN), ty = tid / (BN / TN);
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * BM;
  const int64_t col0 = static_cast<int64_t>(blockIdx.y) * BN;
  const int64_t z = blockIdx.z;
  a += z * m * k;
  b += z * k * n;
  c += z * m * n;

  AccT acc[TM][TN] = {};
  for (int64_t k0 = 0; k0 < k; k0 += BK) {
#pragma unroll
    for (int e = tid; e < BM * BK; e += THREADS) {  // A tile: consecutive threads along K
      const int r = e / BK, q = e % BK;
      const int64_t gr = row0 + r, gk = k0 + q;
      as[q][r] = (gr < m && gk < k) ? widen(a[gr * k + gk]) : AccT(0);
    }
#pragma unroll
    for (int e = tid; e < BK * BN; e += THREADS) {  // B tile: consecutive threads along N
      const int q = e / BN, col = e % BN;
      const int64_t gk = k0 + q, gc = col0 + col;
      bs[q][col] = (gk < k && gc < n) ? widen(b[gk * n + gc]) : AccT(0);
    }
    __syncthreads();
#pragma unroll
    for (int q = 0; q < BK; ++q) {
      AccT av[TM], bv[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) av[i] = as[q][ty * TM + i];
#pragma unroll
      for (int j = 0; j < TN; ++j) bv[j] = bs[q][tx + j * (BN / TN)];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] += av[i] * bv[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int64_t gr = row0 + ty * TM + i;
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      // columns tx + j * 16: a warp's stores to one row are consecutive (coalesced)
      const int64_t gc = col0 + tx + j * (BN / TN);
      if (gr < m && gc < n) c[gr * n + gc] = narrow<T>(acc[i][j]);
    }
  }
}

template <typename T>
cudaError_t launch(const T* a, const T* b, T* c, int64_t batch, int64_t m, int64_t n, int64_t k,
                   cudaStream_t stream) {
  constexpr int64_t kMaxZ = 65535;
  const dim3 threads(THREADS);
  for (int64_t z0 = 0; z0 < batch; z0 += kMaxZ) {
    const int64_t zs = batch - z0 < kMaxZ ? batch - z0 : kMaxZ;
    const dim3 grid((m + BM - 1) / BM, (n + BN - 1) / BN, zs);
    tiled_matmul_kernel<T><<<grid, threads, 0, stream>>>(a + z0 * m * k, b + z0 * k * n,
                                                          c + z0 * m * n, m, n, k);
  }
  return cudaGetLastError();
}

// the entry points tiled_matmul_cuda.cpp declares
cudaError_t tiled_matmul_f32(const float* a, const float* b, float* c, int64_t batch, int64_t m,
                             int64_t n, int64_t k, cudaStream_t s) {
  return launch(a, b, c, batch, m, n, k, s);
}
cudaError_t tiled_matmul_f64(const double* a, const double* b, double* c, int64_t batch,
                             int64_t m, int64_t n, int64_t k, cudaStream_t s) {
  return launch(a, b, c, batch, m, n, k, s);
}
cudaError_t tiled_matmul_bf16(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* c,
                              int64_t batch, int64_t m, int64_t n, int64_t k, cudaStream_t s) {
  return launch(a, b, c, batch, m, n, k, s);
}

}  // namespace litlab
