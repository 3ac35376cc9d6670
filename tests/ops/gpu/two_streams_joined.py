"""Honest: the two halves of the tensor on two streams at once, the side stream ordered after
the caller's and joined back before returning."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


_side = torch.cuda.Stream()


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        half = n // 2
        main = torch.cuda.current_stream()
        _side.wait_stream(main)
        relu_kernel[(triton.cdiv(half, 1024),)](x, y, half, BLOCK=1024)
        with torch.cuda.stream(_side):
            relu_kernel[(triton.cdiv(n - half, 1024),)](x.view(-1)[half:], y.view(-1)[half:], n - half, BLOCK=1024)
        main.wait_stream(_side)  # joined: x and y stay alive on the caller's stream after this
        return y
