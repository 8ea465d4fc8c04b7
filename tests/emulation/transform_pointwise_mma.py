# Rewrites csrc/kernels/pointwise_mma.cu for the host emulation (rewrite.py: each
# rewrite matches as counted).
import sys
from rewrite import Rewrite, inline_async_copy, inline_mma_sync
rewrite = Rewrite(inline_mma_sync(inline_async_copy(open(sys.argv[1]).read())))
sub = rewrite.sub
sub(r'extern __shared__ __align__\(128\) unsigned char shared_bytes\[\];', 'unsigned char* shared_bytes = emu_shared();', 1)
sub(r'#if defined\(__CUDA_ARCH__\) && __CUDA_ARCH__ >= 800', '#if 1', 1)
sub(r'kernel<<<dim3\(static_cast<unsigned>\(blocks\)\), kThreads, plan\.shared_bytes, c\.stream>>>\(',
    'emu_launch(kernel, dim3(static_cast<unsigned>(blocks)), kThreads, plan.shared_bytes, c.stream, ', 1)
rewrite.write(sys.argv[2])
