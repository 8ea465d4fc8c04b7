# Rewrites csrc/kernels/pointwise_filter.cu (with the shared finish, slice_sum.cuh,
# inlined) for the host emulation (rewrite.py: each rewrite matches as counted).
import sys
from rewrite import Rewrite, inline_async_copy, inline_mma_sync, inline_slice_sum
rewrite = Rewrite(inline_mma_sync(inline_async_copy(inline_slice_sum(open(sys.argv[1]).read()))))
sub = rewrite.sub
sub(r'extern __shared__ __align__\(128\) unsigned char shared_bytes\[\];', 'unsigned char* shared_bytes = emu_shared();', 1)
sub(r'#if defined\(__CUDA_ARCH__\) && __CUDA_ARCH__ >= 800', '#if 1', 1)
sub(r'kernel<<<dim3\(static_cast<unsigned>\(slices\)\), kThreads, plan\.shared_bytes, stream>>>\(',
    'emu_launch(kernel, dim3(static_cast<unsigned>(slices)), kThreads, plan.shared_bytes, stream, ', 1)
rewrite.write(sys.argv[2])
