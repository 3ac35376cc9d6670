"""A CUDA source that launches its kernel on a non-blocking stream it creates itself, after an
event on the caller's stream, and returns without the caller's stream waiting for it."""
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>

__global__ void relu_repeat(const float* x, float* y, long n, int times) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = 0.f;
    for (int t = 0; t < times; ++t) v = fmaxf(x[i], 0.f) + v * 0.f;
    y[i] = v;
}

static cudaStream_t own = nullptr;

torch::Tensor relu_own_stream(torch::Tensor x) {
    if (own == nullptr) cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking);
    auto y = torch::empty_like(x);
    cudaEvent_t ready;
    cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
    cudaEventRecord(ready, at::cuda::getCurrentCUDAStream());
    cudaStreamWaitEvent(own, ready, 0);
    long n = x.numel();
    for (int r = 0; r < 30; ++r)
        relu_repeat<<<(n + 255) / 256, 256, 0, own>>>(x.data_ptr<float>(), y.data_ptr<float>(), n, 4);
    cudaEventDestroy(ready);
    return y;
}
"""
CPP = "torch::Tensor relu_own_stream(torch::Tensor x);"

_ext = load_inline("okgit_cuda_own_stream", cpp_sources=CPP, cuda_sources=CUDA, functions=["relu_own_stream"],
                   extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return _ext.relu_own_stream(x.contiguous())
