# Rewrites csrc/kernels/grouped_mma.cu for the host emulation (rewrite.py: each
# rewrite matches as counted).
import sys
from rewrite import Rewrite, inline_async_copy
rewrite = Rewrite(inline_async_copy(open(sys.argv[1]).read()))
sub = rewrite.sub
sub(r'extern __shared__ __align__\(128\) unsigned char shared_bytes\[\];', 'unsigned char* shared_bytes = emu_shared();', 1)
sub(r'#if defined\(__CUDA_ARCH__\) && __CUDA_ARCH__ >= 800', '#if 1', 3)
# The bf16 fragment loads (PTX with .shared) become wmma's generic load.
sub(r'unsigned\* const r = reinterpret_cast<unsigned\*>\(&f\);\s*const unsigned at = static_cast<unsigned>\(__cvta_generic_to_shared\(p\)\);\s*asm volatile\("wmma\.load\.[ab]\.sync\.aligned\.row\.m16n16k16\.shared\.bf16 \{%0, %1, %2, %3\}, \[%4\], %5;\\n"\s*: "=r"\(r\[0\]\), "=r"\(r\[1\]\), "=r"\(r\[2\]\), "=r"\(r\[3\]\)\s*: "r"\(at\), "r"\(ldm\)\s*: "memory"\);',
    'nvcuda::wmma::load_matrix_sync(f, p, ldm);', 2)
sub(r'kernel<<<grid, kThreads, plan\.shared_bytes, c\.stream>>>\(', 'emu_launch(kernel, grid, kThreads, plan.shared_bytes, c.stream, ', 1)
rewrite.write(sys.argv[2])
