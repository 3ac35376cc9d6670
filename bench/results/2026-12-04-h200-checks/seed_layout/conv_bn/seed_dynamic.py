"""2D convolution then batch norm (its mode: training or eval, as the module is)."""
import torch
from torch import nn
import warnings
import triton
import triton.language as tl


# Kernels seeded from torch.compile (Inductor, default mode): Inductor's own Triton kernels with
# the launch settings its autotuning chose, launched explicitly; no torch.compile at run time.
from torch._inductor.runtime import triton_helpers  # Inductor's Triton helper functions (no compilation)
from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math

aten = torch.ops.aten


def empty_strided(device, size, stride, dtype):
    """A buffer on the arguments' device (Inductor's empty_strided_cuda / _cpu)."""
    return torch.empty_strided(size, stride, dtype=dtype, device=device)


def reinterpret_tensor(t, size, stride, offset):
    """A view of t's storage: Inductor's buffer reuse."""
    return t.as_strided(size, stride, t.storage_offset() + offset)


def fits(t, shape, stride, dtype, devices):
    """Whether tensor t has the shape, strides, dtype and device the kernels were compiled for, and
    no gradient is wanted of it (they compute the forward only)."""
    return (t.shape == shape and t.stride() == stride and t.dtype == dtype and t.device.type in devices
            and not (t.requires_grad and torch.is_grad_enabled()))


def reference_forward(model, *args):
    """The reference's own forward, for arguments the kernels were not compiled for; a warning
    says so, once per set of shapes."""
    shapes = [tuple(a.shape) if isinstance(a, torch.Tensor) else a for a in args]
    state = "training" if model.training else "eval"
    warnings.warn(f"{type(model).__name__}: okgit's Inductor kernels do not apply to inputs {shapes} ({state} mode); "
                  "running the original forward", stacklevel=3)
    return model.forward_reference(*args)


# the vendor calls (cuBLAS, cuDNN) Inductor left to PyTorch
from types import SimpleNamespace  # noqa: E402

extern_kernels = SimpleNamespace(convolution=torch.convolution)


# Topologically Sorted Source Nodes: [conv2d, batch_norm], Original ATen: [aten.convolution, aten._native_batch_norm_legit_functional]
@triton.jit
def triton_red_fused__native_batch_norm_legit_functional_convolution_0_train(in_ptr0, in_ptr1, out_ptr0, out_ptr1, out_ptr2, ks0, ks1, ks2, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
    xnumel = 512
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    rbase = r0_base
    x1 = xindex // 128
    x0 = (xindex % 128)
    tmp17_mean = tl.zeros([XBLOCK, R0_BLOCK], tl.float32)
    tmp17_m2 = tl.zeros([XBLOCK, R0_BLOCK], tl.float32)
    tmp17_weight = tl.zeros([XBLOCK, R0_BLOCK], tl.float32)
    x3 = xindex
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_2 = r0_index
        tmp0 = r0_2 + ks2*x1 + x1*(triton_helpers.div_floor_integer(3 + ((-2)*ks0*ks2) + ((-2)*ks1*ks2) + ks0*ks1*ks2,  4))
        tmp1 = 4*ks2 + ((-2)*ks0*ks2) + ((-2)*ks1*ks2) + ks0*ks1*ks2
        tmp2 = tmp0 < tmp1
        tmp3 = tl.load(in_ptr0 + (((1) * ((1) >= ((-2) + ks0)) + ((-2) + ks0) * (((-2) + ks0) > (1)))*((((r0_2 + ks2*x1 + x1*(triton_helpers.div_floor_integer(3 + ((-2)*ks0*ks2) + ((-2)*ks1*ks2) + ks0*ks1*ks2,  4))) // ((-2) + ks0)) % ((-2) + ks1))) + x0*((1) * ((1) >= ((-2) + ks0)) + ((-2) + ks0) * (((-2) + ks0) > (1)))*((1) * ((1) >= ((-2) + ks1)) + ((-2) + ks1) * (((-2) + ks1) > (1))) + 128*((1) * ((1) >= ((-2) + ks0)) + ((-2) + ks0) * (((-2) + ks0) > (1)))*((1) * ((1) >= ((-2) + ks1)) + ((-2) + ks1) * (((-2) + ks1) > (1)))*((((r0_2 + ks2*x1 + x1*(triton_helpers.div_floor_integer(3 + ((-2)*ks0*ks2) + ((-2)*ks1*ks2) + ks0*ks1*ks2,  4))) // (4 + ((-2)*ks0) + ((-2)*ks1) + ks0*ks1)) % ks2)) + (((r0_2 + ks2*x1 + x1*(triton_helpers.div_floor_integer(3 + ((-2)*ks0*ks2) + ((-2)*ks1*ks2) + ks0*ks1*ks2,  4))) % ((-2) + ks0)))), r0_mask & tmp2 & xmask, eviction_policy='evict_last', other=0.0)
        tmp4 = tl.load(in_ptr1 + (tl.broadcast_to(x0, [XBLOCK, R0_BLOCK])), r0_mask & tmp2 & xmask, eviction_policy='evict_last', other=0.0)
        tmp5 = tmp3 + tmp4
        tmp6 = tl.full(tmp5.shape, 0, tmp5.dtype)
        tmp7 = tl.where(tmp2, tmp5, tmp6)
        tmp8 = tl.full([1, 1], 0.0, tl.float32)
        tmp9 = tl.full(tmp8.shape, 0, tmp8.dtype)
        tmp10 = tl.where(tmp2, tmp8, tmp9)
        tmp11 = tl.full([1, 1], 1.0, tl.float32)
        tmp12 = tl.full(tmp11.shape, 0, tmp11.dtype)
        tmp13 = tl.where(tmp2, tmp11, tmp12)
        tmp14 = tl.broadcast_to(tmp7, [XBLOCK, R0_BLOCK])
        tmp15 = tl.broadcast_to(tmp10, [XBLOCK, R0_BLOCK])
        tmp16 = tl.broadcast_to(tmp13, [XBLOCK, R0_BLOCK])
        tmp17_mean_next, tmp17_m2_next, tmp17_weight_next = triton_helpers.welford_combine(
            tmp17_mean, tmp17_m2, tmp17_weight,
            tmp14, tmp15, tmp16
        )
        tmp17_mean = tl.where(r0_mask & xmask, tmp17_mean_next, tmp17_mean)
        tmp17_m2 = tl.where(r0_mask & xmask, tmp17_m2_next, tmp17_m2)
        tmp17_weight = tl.where(r0_mask & xmask, tmp17_weight_next, tmp17_weight)
    tmp18, tmp19, tmp20 = triton_helpers.welford(tmp17_mean, tmp17_m2, tmp17_weight, 1)
    tmp17 = tmp18[:, None]
    tmp21 = tmp19[:, None]
    tmp22 = tmp20[:, None]
    tl.store(out_ptr0 + (x3), tmp17, xmask)
    tl.store(out_ptr1 + (x3), tmp21, xmask)
    tl.store(out_ptr2 + (x3), tmp22, xmask)


def launch_triton_red_fused__native_batch_norm_legit_functional_convolution_0_train(in_ptr0, in_ptr1, out_ptr0, out_ptr1, out_ptr2, ks0, ks1, ks2, xnumel, r0_numel):
    triton_red_fused__native_batch_norm_legit_functional_convolution_0_train[(xnumel, 1, 1)](in_ptr0, in_ptr1, out_ptr0, out_ptr1, out_ptr2, ks0, ks1, ks2, xnumel, r0_numel, XBLOCK=1, R0_BLOCK=2048, num_warps=16, num_stages=1)


# Topologically Sorted Source Nodes: [conv2d, batch_norm], Original ATen: [aten.convolution, aten._native_batch_norm_legit_functional, aten.copy_]
@triton.jit
def triton_per_fused__native_batch_norm_legit_functional_convolution_copy__1_train(in_ptr0, in_ptr1, in_ptr2, in_ptr3, in_ptr4, out_ptr0, out_ptr1, out_ptr3, out_ptr5, ks0, ks1, ks2, xnumel, r0_numel, XBLOCK : tl.constexpr):
    xnumel = 128
    r0_numel = 4
    R0_BLOCK: tl.constexpr = 4
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_index = tl.arange(0, R0_BLOCK)[None, :]
    r0_offset = 0
    r0_mask = tl.full([R0_BLOCK], True, tl.int1)[None, :]
    roffset = r0_offset
    rindex = r0_index
    r0_1 = r0_index
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + (x0 + 128*r0_1), xmask, other=0.0)
    tmp1 = tl.load(in_ptr1 + (x0 + 128*r0_1), xmask, other=0.0)
    tmp2 = tl.load(in_ptr2 + (x0 + 128*r0_1), xmask, other=0.0)
    tmp18 = tl.load(in_ptr3 + (x0), xmask, eviction_policy='evict_last')
    tmp29 = tl.load(in_ptr4 + (x0), xmask, eviction_policy='evict_last')
    tmp3 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])
    tmp4 = tl.broadcast_to(tmp1, [XBLOCK, R0_BLOCK])
    tmp5 = tl.broadcast_to(tmp2, [XBLOCK, R0_BLOCK])
    tmp7 = tl.where(xmask, tmp3, 0)
    tmp8 = tl.where(xmask, tmp4, 0)
    tmp9 = tl.where(xmask, tmp5, 0)
    tmp10, tmp11, tmp12 = triton_helpers.welford(tmp7, tmp8, tmp9, 1)
    tmp13 = tmp10[:, None]
    tmp14 = tmp11[:, None]
    tmp15 = tmp12[:, None]
    tmp16 = tl.full([1, 1], 0.1, tl.float32)
    tmp17 = tmp13 * tmp16
    tmp19 = tl.full([1, 1], 0.9, tl.float32)
    tmp20 = tmp18 * tmp19
    tmp21 = tmp17 + tmp20
    tmp22 = ((0) * ((0) >= (4*ks2 + ((-2)*ks0*ks2) + ((-2)*ks1*ks2) + ks0*ks1*ks2)) + (4*ks2 + ((-2)*ks0*ks2) + ((-2)*ks1*ks2) + ks0*ks1*ks2) * ((4*ks2 + ((-2)*ks0*ks2) + ((-2)*ks1*ks2) + ks0*ks1*ks2) > (0)))
    tmp23 = tmp22.to(tl.float32)
    tmp24 = (tmp14 / tmp23)
    tmp25 = (((512*ks2 + ((-256)*ks0*ks2) + ((-256)*ks1*ks2) + 128*ks0*ks1*ks2) / 128) / ((tl.full([], -1.00000000000000, tl.float64)) + ((512*ks2 + ((-256)*ks0*ks2) + ((-256)*ks1*ks2) + 128*ks0*ks1*ks2) / 128)))
    tmp26 = tmp25.to(tl.float32)
    tmp27 = tmp24 * tmp26
    tmp28 = tmp27 * tmp16
    tmp30 = tmp29 * tmp19
    tmp31 = tmp28 + tmp30
    tl.store(out_ptr3 + (x0), tmp21, xmask)
    tl.store(out_ptr5 + (x0), tmp31, xmask)
    tl.store(out_ptr0 + (x0), tmp13, xmask)
    tl.store(out_ptr1 + (x0), tmp14, xmask)


def launch_triton_per_fused__native_batch_norm_legit_functional_convolution_copy__1_train(in_ptr0, in_ptr1, in_ptr2, in_ptr3, in_ptr4, out_ptr0, out_ptr1, out_ptr3, out_ptr5, ks0, ks1, ks2, xnumel, r0_numel):
    triton_per_fused__native_batch_norm_legit_functional_convolution_copy__1_train[(xnumel, 1, 1)](in_ptr0, in_ptr1, in_ptr2, in_ptr3, in_ptr4, out_ptr0, out_ptr1, out_ptr3, out_ptr5, ks0, ks1, ks2, xnumel, r0_numel, XBLOCK=1, num_warps=2, num_stages=1)


# Topologically Sorted Source Nodes: [conv2d, batch_norm], Original ATen: [aten.convolution, aten._native_batch_norm_legit_functional]
@triton.jit
def triton_poi_fused__native_batch_norm_legit_functional_convolution_2_train(in_out_ptr0, in_ptr0, in_ptr1, in_ptr2, in_ptr3, in_ptr4, ks0, ks1, ks2, ks3, ks4, ks5, xnumel, XBLOCK : tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    x0 = (xindex % ks0)
    x1 = ((xindex // ks0) % ks1)
    x4 = xindex // ks2
    x2 = ((xindex // ks2) % 128)
    tmp0 = tl.load(in_out_ptr0 + (x0 + x1*((1) * ((1) >= ((-2) + ks3)) + ((-2) + ks3) * (((-2) + ks3) > (1))) + x4*((1) * ((1) >= ((-2) + ks3)) + ((-2) + ks3) * (((-2) + ks3) > (1)))*((1) * ((1) >= ((-2) + ks4)) + ((-2) + ks4) * (((-2) + ks4) > (1)))), xmask, eviction_policy='evict_last')
    tmp1 = tl.load(in_ptr0 + (x2), xmask, eviction_policy='evict_last')
    tmp3 = tl.load(in_ptr1 + (x2), xmask, eviction_policy='evict_last')
    tmp5 = tl.load(in_ptr2 + (x2), xmask, eviction_policy='evict_last')
    tmp13 = tl.load(in_ptr3 + (x2), xmask, eviction_policy='evict_last')
    tmp15 = tl.load(in_ptr4 + (x2), xmask, eviction_policy='evict_last')
    tmp2 = tmp0 + tmp1
    tmp4 = tmp2 - tmp3
    tmp6 = ((0) * ((0) >= (4*ks5 + ((-2)*ks3*ks5) + ((-2)*ks4*ks5) + ks3*ks4*ks5)) + (4*ks5 + ((-2)*ks3*ks5) + ((-2)*ks4*ks5) + ks3*ks4*ks5) * ((4*ks5 + ((-2)*ks3*ks5) + ((-2)*ks4*ks5) + ks3*ks4*ks5) > (0)))
    tmp7 = tmp6.to(tl.float32)
    tmp8 = (tmp5 / tmp7)
    tmp9 = tl.full([1], 1e-05, tl.float32)
    tmp10 = tmp8 + tmp9
    tmp11 = libdevice.rsqrt(tmp10)
    tmp12 = tmp4 * tmp11
    tmp14 = tmp12 * tmp13
    tmp16 = tmp14 + tmp15
    tl.store(in_out_ptr0 + (x0 + x1*((1) * ((1) >= (ks0)) + (ks0) * ((ks0) > (1))) + x4*((1) * ((1) >= (ks0)) + (ks0) * ((ks0) > (1)))*((1) * ((1) >= (ks1)) + (ks1) * ((ks1) > (1)))), tmp16, xmask)


def launch_triton_poi_fused__native_batch_norm_legit_functional_convolution_2_train(in_out_ptr0, in_ptr0, in_ptr1, in_ptr2, in_ptr3, in_ptr4, ks0, ks1, ks2, ks3, ks4, ks5, xnumel):
    triton_poi_fused__native_batch_norm_legit_functional_convolution_2_train[(-((xnumel) // -(1024)), 1, 1)](in_out_ptr0, in_ptr0, in_ptr1, in_ptr2, in_ptr3, in_ptr4, ks0, ks1, ks2, ks3, ks4, ks5, xnumel, XBLOCK=1024, num_warps=4, num_stages=1)


# Topologically Sorted Source Nodes: [add_], Original ATen: [aten.add, aten.copy_]
@triton.jit
def triton_poi_fused_add_copy__3_train(in_ptr0, out_ptr1, xnumel, XBLOCK : tl.constexpr):
    xnumel = 1
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = tl.full([XBLOCK], True, tl.int1)[:]
    tmp0 = tl.load(in_ptr0 + (0))
    tmp1 = tl.broadcast_to(tmp0, [XBLOCK])
    tmp2 = tl.full([1], 1, tl.int64)
    tmp3 = tmp1 + tmp2
    tl.store(out_ptr1 + (tl.full([XBLOCK], 0, tl.int32).broadcast_to(XBLOCK)), tmp3, None)


def launch_triton_poi_fused_add_copy__3_train(in_ptr0, out_ptr1, xnumel):
    triton_poi_fused_add_copy__3_train[(xnumel, 1, 1)](in_ptr0, out_ptr1, xnumel, XBLOCK=1, num_warps=1, num_stages=1)


def call_train(args):
    args_device = args[2].device
    arg0_1, arg1_1, arg2_1, arg3_1, arg4_1, arg5_1, arg6_1, arg7_1, arg8_1, arg9_1, arg10_1, arg11_1, arg12_1 = args
    args.clear()
    s65 = arg0_1
    s83 = arg1_1
    s77 = arg4_1
    s53 = arg5_1
    s0 = arg6_1
    arg2_1_size = arg2_1.size()
    s11 = arg2_1_size[0]
    s27 = arg2_1_size[1]
    # Topologically Sorted Source Nodes: [conv2d], Original ATen: [aten.convolution]
    buf0 = extern_kernels.convolution(arg7_1, arg2_1, stride=(1, 1), padding=(0, 0), dilation=(1, 1), transposed=False, output_padding=(0, 0), groups=1, bias=None)
    del arg2_1
    del arg7_1
    buf1 = empty_strided(args_device, (1, 128, 1, 1, 4), (512, 1, 512, 512, 128), torch.float32)
    buf2 = empty_strided(args_device, (1, 128, 1, 1, 4), (512, 1, 512, 512, 128), torch.float32)
    buf3 = empty_strided(args_device, (1, 128, 1, 1, 4), (512, 1, 512, 512, 128), torch.float32)
    # Topologically Sorted Source Nodes: [conv2d, batch_norm], Original ATen: [aten.convolution, aten._native_batch_norm_legit_functional]
    triton_red_fused__native_batch_norm_legit_functional_convolution_0_r0_numel = s77 + ((3 + ((-2)*s0*s77) + ((-2)*s53*s77) + s0*s53*s77) // 4)
    launch_triton_red_fused__native_batch_norm_legit_functional_convolution_0_train(buf0, arg3_1, buf1, buf2, buf3, s0, s53, s77, 512, triton_red_fused__native_batch_norm_legit_functional_convolution_0_r0_numel)
    buf4 = empty_strided(args_device, (1, 128, 1, 1), (128, 1, 1, 1), torch.float32)
    buf5 = empty_strided(args_device, (1, 128, 1, 1), (128, 1, 128, 128), torch.float32)
    # Topologically Sorted Source Nodes: [conv2d, batch_norm], Original ATen: [aten.convolution, aten._native_batch_norm_legit_functional, aten.copy_]
    launch_triton_per_fused__native_batch_norm_legit_functional_convolution_copy__1_train(buf1, buf2, buf3, arg9_1, arg10_1, buf4, buf5, arg9_1, arg10_1, s0, s53, s77, 128, 4)
    del arg10_1
    del arg9_1
    del buf1
    del buf2
    del buf3
    ps0 = (-2) + s0
    ps1 = (-2) + s53
    ps2 = 4 + ((-2)*s0) + ((-2)*s53) + s0*s53
    buf7 = buf0; del buf0  # reuse
    # Topologically Sorted Source Nodes: [conv2d, batch_norm], Original ATen: [aten.convolution, aten._native_batch_norm_legit_functional]
    triton_poi_fused__native_batch_norm_legit_functional_convolution_2_xnumel = 512*s77 + ((-256)*s0*s77) + ((-256)*s53*s77) + 128*s0*s53*s77
    launch_triton_poi_fused__native_batch_norm_legit_functional_convolution_2_train(buf7, arg3_1, buf4, buf5, arg11_1, arg12_1, ps0, ps1, ps2, s0, s53, s77, triton_poi_fused__native_batch_norm_legit_functional_convolution_2_xnumel)
    del arg11_1
    del arg12_1
    del arg3_1
    del buf4
    del buf5
    # Topologically Sorted Source Nodes: [add_], Original ATen: [aten.add, aten.copy_]
    launch_triton_poi_fused_add_copy__3_train(arg8_1, arg8_1, 1)
    del arg8_1
    return (buf7, )


def fits_train(self, x):
    """Whether call_train applies: the shapes, strides, dtypes and devices it was compiled for,
    its sizes free where the relations Inductor relied on hold, and the constants it baked in."""
    if not all(isinstance(t, torch.Tensor) and t.dim() == n for t, n in ((self.conv.weight, 4), (self.conv.bias, 1), (x, 4), (self.bn.num_batches_tracked, 0), (self.bn.running_mean, 1), (self.bn.running_var, 1), (self.bn.weight, 1), (self.bn.bias, 1))):
        return False
    s0 = x.size(3)
    s53 = x.size(2)
    s77 = x.size(0)
    return (
        fits(self.conv.weight, (128, 64, 3, 3), (576, 9, 3, 1), torch.float32, ('cuda',))
        and fits(self.conv.bias, (128,), (1,), torch.float32, ('cuda',))
        and fits(x, (s77, 64, s53, s0), (64*s0*s53, s0*s53, s0, 1), torch.float32, ('cuda',))
        and fits(self.bn.num_batches_tracked, (), (), torch.int64, ('cuda',))
        and fits(self.bn.running_mean, (128,), (1,), torch.float32, ('cuda',))
        and fits(self.bn.running_var, (128,), (1,), torch.float32, ('cuda',))
        and fits(self.bn.weight, (128,), (1,), torch.float32, ('cuda',))
        and fits(self.bn.bias, (128,), (1,), torch.float32, ('cuda',))
        and s53 >= 3
        and s0 >= 3
        and 64*s0*s53 <= 2147483647
        and 512 + ((-256)*s0) + ((-256)*s53) + 128*s0*s53 <= 2147483647
        and s77 <= 880801
        and 512*s77 + ((-256)*s0*s77) + ((-256)*s53*s77) + 128*s0*s53*s77 < 2147483647
        and ((-2) + s0) != 1
        and ((-2) + s53) != 1
        and (((-2) + s0)*((-2) + s53)) != 1
        and (-2) + s0 < ((-2) + s0)*((-2) + s53)
        and (-2) + s0 > 1
        and 512*s77 + 512*((3 + ((-2)*s0*s77) + ((-2)*s53*s77) + s0*s53*s77) // 4) <= 2147483647
        and 512*s77 + 128*s0*s53*s77 <= 2147483647 + 256*s0*s77 + 256*s53*s77
        and s0 >= 4
        and s77 >= 2
        and self.conv.padding_mode == 'zeros'
        and self.conv.stride == (1, 1)
        and self.conv.padding == (0, 0)
        and self.conv.dilation == (1, 1)
        and self.conv.groups == 1
        and self.bn.momentum == 0.1
        and self.bn.training == True
        and self.bn.track_running_stats == True
        and self.bn.eps == 1e-05
    )


# Topologically Sorted Source Nodes: [conv2d, batch_norm], Original ATen: [aten.convolution, aten._native_batch_norm_legit_no_training]
@triton.jit
def triton_poi_fused__native_batch_norm_legit_no_training_convolution_0_eval(in_out_ptr0, in_ptr0, in_ptr1, in_ptr2, in_ptr3, in_ptr4, ks0, ks1, ks2, ks3, ks4, xnumel, XBLOCK : tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    x0 = (xindex % ks0)
    x1 = ((xindex // ks0) % ks1)
    x4 = xindex // ks2
    x2 = ((xindex // ks2) % 128)
    tmp0 = tl.load(in_out_ptr0 + (x0 + x1*((1) * ((1) >= ((-2) + ks3)) + ((-2) + ks3) * (((-2) + ks3) > (1))) + x4*((1) * ((1) >= ((-2) + ks3)) + ((-2) + ks3) * (((-2) + ks3) > (1)))*((1) * ((1) >= ((-2) + ks4)) + ((-2) + ks4) * (((-2) + ks4) > (1)))), xmask, eviction_policy='evict_last')
    tmp1 = tl.load(in_ptr0 + (x2), xmask, eviction_policy='evict_last')
    tmp3 = tl.load(in_ptr1 + (x2), xmask, eviction_policy='evict_last')
    tmp5 = tl.load(in_ptr2 + (x2), xmask, eviction_policy='evict_last')
    tmp14 = tl.load(in_ptr3 + (x2), xmask, eviction_policy='evict_last')
    tmp16 = tl.load(in_ptr4 + (x2), xmask, eviction_policy='evict_last')
    tmp2 = tmp0 + tmp1
    tmp4 = tmp2 - tmp3
    tmp6 = tl.full([1], 1e-05, tl.float32)
    tmp7 = tmp5 + tmp6
    tmp8 = tl.sqrt_rn(tmp7)
    tmp9 = tl.full([1], 1, tl.int32)
    tmp10 = (tmp9 / tmp8)
    tmp11 = tl.full([1], 1.0, tl.float32)
    tmp12 = tmp10 * tmp11
    tmp13 = tmp4 * tmp12
    tmp15 = tmp13 * tmp14
    tmp17 = tmp15 + tmp16
    tl.store(in_out_ptr0 + (x0 + x1*((1) * ((1) >= (ks0)) + (ks0) * ((ks0) > (1))) + x4*((1) * ((1) >= (ks0)) + (ks0) * ((ks0) > (1)))*((1) * ((1) >= (ks1)) + (ks1) * ((ks1) > (1)))), tmp17, xmask)


def launch_triton_poi_fused__native_batch_norm_legit_no_training_convolution_0_eval(in_out_ptr0, in_ptr0, in_ptr1, in_ptr2, in_ptr3, in_ptr4, ks0, ks1, ks2, ks3, ks4, xnumel):
    triton_poi_fused__native_batch_norm_legit_no_training_convolution_0_eval[(-((xnumel) // -(1024)), 1, 1)](in_out_ptr0, in_ptr0, in_ptr1, in_ptr2, in_ptr3, in_ptr4, ks0, ks1, ks2, ks3, ks4, xnumel, XBLOCK=1024, num_warps=4, num_stages=1)


def call_eval(args):
    args_device = args[2].device
    arg0_1, arg1_1, arg2_1, arg3_1, arg4_1, arg5_1, arg6_1, arg7_1, arg8_1, arg9_1, arg10_1, arg11_1 = args
    args.clear()
    s65 = arg0_1
    s83 = arg1_1
    s77 = arg4_1
    s53 = arg5_1
    s0 = arg6_1
    arg2_1_size = arg2_1.size()
    s11 = arg2_1_size[0]
    s27 = arg2_1_size[1]
    # Topologically Sorted Source Nodes: [conv2d], Original ATen: [aten.convolution]
    buf0 = extern_kernels.convolution(arg7_1, arg2_1, stride=(1, 1), padding=(0, 0), dilation=(1, 1), transposed=False, output_padding=(0, 0), groups=1, bias=None)
    del arg2_1
    del arg7_1
    ps0 = (-2) + s0
    ps1 = (-2) + s53
    ps2 = 4 + ((-2)*s0) + ((-2)*s53) + s0*s53
    buf1 = buf0; del buf0  # reuse
    # Topologically Sorted Source Nodes: [conv2d, batch_norm], Original ATen: [aten.convolution, aten._native_batch_norm_legit_no_training]
    triton_poi_fused__native_batch_norm_legit_no_training_convolution_0_xnumel = 512*s77 + ((-256)*s0*s77) + ((-256)*s53*s77) + 128*s0*s53*s77
    launch_triton_poi_fused__native_batch_norm_legit_no_training_convolution_0_eval(buf1, arg3_1, arg8_1, arg9_1, arg10_1, arg11_1, ps0, ps1, ps2, s0, s53, triton_poi_fused__native_batch_norm_legit_no_training_convolution_0_xnumel)
    del arg10_1
    del arg11_1
    del arg3_1
    del arg8_1
    del arg9_1
    return (buf1, )


def fits_eval(self, x):
    """Whether call_eval applies: the shapes, strides, dtypes and devices it was compiled for,
    its sizes free where the relations Inductor relied on hold, and the constants it baked in."""
    if not all(isinstance(t, torch.Tensor) and t.dim() == n for t, n in ((self.conv.weight, 4), (self.conv.bias, 1), (x, 4), (self.bn.running_mean, 1), (self.bn.running_var, 1), (self.bn.weight, 1), (self.bn.bias, 1))):
        return False
    s0 = x.size(3)
    s53 = x.size(2)
    s77 = x.size(0)
    return (
        fits(self.conv.weight, (128, 64, 3, 3), (576, 9, 3, 1), torch.float32, ('cuda',))
        and fits(self.conv.bias, (128,), (1,), torch.float32, ('cuda',))
        and fits(x, (s77, 64, s53, s0), (64*s0*s53, s0*s53, s0, 1), torch.float32, ('cuda',))
        and fits(self.bn.running_mean, (128,), (1,), torch.float32, ('cuda',))
        and fits(self.bn.running_var, (128,), (1,), torch.float32, ('cuda',))
        and fits(self.bn.weight, (128,), (1,), torch.float32, ('cuda',))
        and fits(self.bn.bias, (128,), (1,), torch.float32, ('cuda',))
        and s53 >= 3
        and s0 >= 3
        and 64*s0*s53 <= 2147483647
        and 512 + ((-256)*s0) + ((-256)*s53) + 128*s0*s53 <= 2147483647
        and s77 <= 880801
        and s77 <= 65535
        and 512*s77 + ((-256)*s0*s77) + ((-256)*s53*s77) + 128*s0*s53*s77 < 2147483647
        and ((-2) + s0) != 1
        and ((-2) + s53) != 1
        and (((-2) + s0)*((-2) + s53)) != 1
        and (-2) + s0 < ((-2) + s0)*((-2) + s53)
        and (-2) + s0 > 1
        and 512*s77 + 128*s0*s53*s77 <= 2147483647 + 256*s0*s77 + 256*s53*s77
        and s0 >= 4
        and s77 >= 2
        and self.conv.padding_mode == 'zeros'
        and self.conv.stride == (1, 1)
        and self.conv.padding == (0, 0)
        and self.conv.dilation == (1, 1)
        and self.conv.groups == 1
        and self.bn.momentum == 0.1
        and self.bn.training == False
        and self.bn.eps == 1e-05
    )


class Model(nn.Module):
    def __init__(self, c_in, c_out):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3)
        self.bn = nn.BatchNorm2d(c_out)

    def forward(self, x):
        """The kernels above where the arguments fit what they were compiled for; the reference's
        own forward otherwise, said in a warning."""
        if self.training:
            if fits_train(self, x):
                outs = call_train([self.conv.weight.size(0), self.conv.weight.size(1), self.conv.weight, self.conv.bias, x.size(0), x.size(2), x.size(3), x, self.bn.num_batches_tracked, self.bn.running_mean, self.bn.running_var, self.bn.weight, self.bn.bias])
                return outs[0]
        else:
            if fits_eval(self, x):
                outs = call_eval([self.conv.weight.size(0), self.conv.weight.size(1), self.conv.weight, self.conv.bias, x.size(0), x.size(2), x.size(3), x, self.bn.running_mean, self.bn.running_var, self.bn.weight, self.bn.bias])
                return outs[0]
        return reference_forward(self, x)

    def forward_reference(self, x):
        return self.bn(self.conv(x))


batch = 32
c_in = 64
c_out = 128
size = 64


def get_inputs():
    return [torch.randn(batch, c_in, size, size)]


def get_init_inputs():
    return [c_in, c_out]
