// Binds the CUDA kernel of tiled_matmul_cuda_kernel.cu to torch as
// litlab_kernels::tiled_matmul_cuda (the Python op litlab::tiled_matmul calls it on CUDA tensors
// when LITLAB_OPS_CUDA_BACKEND=cuda, or when Triton is absent).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_bf16.h>
#include <torch/library.h>

namespace litlab {
cudaError_t tiled_matmul_f32(const float*, const float*, float*, int64_t, int64_t, int64_t,
                             int64_t, cudaStream_t);
cudaError_t tiled_matmul_f64(const double*, const double*, double*, int64_t, int64_t, int64_t,
                             int64_t, cudaStream_t);
cudaError_t tiled_matmul_bf16(const __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*, int64_t,
                              int64_t, int64_t, int64_t, cudaStream_t);
}  // namespace litlab

namespace {

at::Tensor tiled_matmul_cuda(const at::Tensor& a_in, const at::Tensor& b_in) {
  TORCH_CHECK(a_in.is_cuda() && b_in.is_cuda(), "tiled_matmul_cuda: CUDA tensors only");
  TORCH_CHECK(a_in.dim() == b_in.dim() && (a_in.dim() == 2 || a_in.dim() == 3),
              "tiled_matmul_cuda: two 2-D or two 3-D tensors");
  TORCH_CHECK(a_in.scalar_type() == b_in.scalar_type(), "tiled_matmul_cuda: dtypes differ");
  const c10::cuda::CUDAGuard guard(a_in.device());
  const bool flat = a_in.dim() == 2;
  // the kernel's coalesced loads assume row-major inputs
  const at::Tensor a = (flat ? a_in.unsqueeze(0) : a_in).contiguous();
  const at::Tensor b = (flat ? b_in.unsqueeze(0) : b_in).contiguous();
  TORCH_CHECK(a.size(0) == b.size(0) && a.size(2) == b.size(1),
              "tiled_matmul_cuda: shapes do not match: ", a_in.sizes(), " @ ", b_in.sizes());
  const int64_t batch = a.size(0), m = a.size(1), k = a.size(2), n = b.size(2);
  at::Tensor c = flat ? at::empty({m, n}, a.options()) : at::empty({batch, m, n}, a.options());
  if (c.numel() == 0) return c;
  if (k == 0) return c.zero_();
  const auto stream = c10::cuda::getCurrentCUDAStream();
  cudaError_t err;
  switch (a.scalar_type()) {
    case at::kFloat:
      err = litlab::tiled_matmul_f32(a.const_data_ptr<float>(), b.const_data_ptr<float>(),
                                     c.mutable_data_ptr<float>(), batch, m, n, k, stream);
      break;
    case at::kDouble:
      err = litlab::tiled_matmul_f64(a.const_data_ptr<double>(), b.const_data_ptr<double>(),
                                     c.mutable_data_ptr<double>(), batch, m, n, k, stream);
      break;
    case at::kBFloat16:
      err = litlab::tiled_matmul_bf16(
          reinterpret_cast<const __nv_bfloat16*>(a.const_data_ptr<at::BFloat16>()),
          reinterpret_cast<const __nv_bfloat16*>(b.const_data_ptr<at::BFloat16>()),
          reinterpret_cast<__nv_bfloat16*>(c.mutable_data_ptr<at::BFloat16>()), batch, m, n, k,
          stream);
      break;
    default:
      TORCH_CHECK(false, "tiled_matmul_cuda: float32, float64 or bfloat16, got ", a.scalar_type());
  }
  TORCH_CHECK(err == cudaSuccess, "tiled_matmul_cuda: ", cudaGetErrorString(err));
  return c;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(litlab_kernels, m) {
  m.def("tiled_matmul_cuda(Tensor a, Tensor b) -> Tensor");
}

TORCH_LIBRARY_IMPL(litlab_kernels, CUDA, m) {
  m.impl("tiled_matmul_cuda", &tiled_matmul_cuda);
}
