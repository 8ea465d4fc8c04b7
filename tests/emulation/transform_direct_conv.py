# Rewrites csrc/kernels/direct_conv.cu (with the shared finish, slice_sum.cuh,
# inlined) for the host emulation (rewrite.py: each rewrite matches as counted).
import sys
from rewrite import Rewrite, inline_slice_sum
rewrite = Rewrite(inline_slice_sum(open(sys.argv[1]).read(), note=True))
sub = rewrite.sub
sub(r'extern __shared__ __align__\(16\) unsigned char (\w+)\[\];', r'unsigned char* \1 = emu_shared();', 3)
# kernel<T, ...><<<grid, block, shared, stream>>>(args) -> emu_launch(kernel<T, ...>, grid, block, shared, stream, args)
sub(r'(\w+<[^<>;]*>)<<<([^<>;]*)>>>\(', r'emu_launch(\1, \2, ', 8)
# Each kernel notes its instantiation (which paths the cases reached).
sub(r'(__global__ void __launch_bounds__\(kThreads\) (?:gather|filter)_\w+\([^{]*\{)', r'\1 emu_note(__PRETTY_FUNCTION__);', 4)
rewrite.write(sys.argv[2])
