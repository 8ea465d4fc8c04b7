# Rewrites csrc/kernels/stem_filter.cu for the host emulation: every rewrite
# must match exactly as counted, so a change in the kernel file that the
# emulation would silently miss fails here instead.
import re, sys
src = open(sys.argv[1]).read()
def sub(pattern, repl, count, flags=0):
    global src
    new, n = re.subn(pattern, repl, src, flags=flags)
    if n != count:
        sys.exit(f"transform: {pattern!r} matched {n} times, expected {count}")
    src = new
sub(r'extern __shared__ __align__\(128\) unsigned char shared_bytes\[\];', 'unsigned char* shared_bytes = emu_shared();', 2)
sub(r'#if defined\(__CUDA_ARCH__\) && __CUDA_ARCH__ >= 800', '#if 1', 1)
sub(r'kernel<<<static_cast<unsigned>\(blocks\), kThreads, plan\.shared_bytes, stream>>>\(',
    'emu_launch(kernel, dim3(static_cast<unsigned>(blocks)), kThreads, plan.shared_bytes, stream, ', 1)
sub(r'stem_filter_finish<T><<<finish_grid, kFinishThreads, kFinishThreads \* sizeof\(float\), stream>>>\(',
    'emu_launch(stem_filter_finish<T>, finish_grid, kFinishThreads, kFinishThreads * sizeof(float), stream, ', 1)
if '<<<' in src or 'asm volatile' in src:
    sys.exit("transform: CUDA-only syntax left")
open(sys.argv[2], 'w').write(src)
