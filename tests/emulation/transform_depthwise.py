# Rewrites csrc/kernels/depthwise.cu (with depthwise_kernels.cuh, depthwise_plane.cuh, depthwise_mma.cuh and
# depthwise_mma_filter.cuh inlined) for
# the host emulation (see tests/emulation/run); with a third argument, the sweep table
# (depthwise_sweep.cuh, every part) is appended, or only its declarations (no variant
# compiled) when a fourth argument says "declarations". Every rewrite must match as
# counted, so a kernel change the emulation would silently miss fails here.
import sys
from rewrite import Rewrite, inline_mma_sync, inline_slice_sum
kernels = inline_slice_sum(open('csrc/kernels/depthwise_kernels.cuh').read().replace('#pragma once', ''), note=True)
plane = open('csrc/kernels/depthwise_plane.cuh').read().replace('#pragma once', '')
plane = plane.replace('#include "kernels/depthwise_kernels.cuh"', '')
mma = open('csrc/kernels/depthwise_mma.cuh').read().replace('#pragma once', '')
mma = mma.replace('#include "kernels/depthwise_kernels.cuh"', '')
mma = inline_mma_sync(mma)
mma_filter = open('csrc/kernels/depthwise_mma_filter.cuh').read().replace('#pragma once', '')
mma_filter = mma_filter.replace('#include "kernels/depthwise_mma.cuh"', '')
choices = open('csrc/kernels/depthwise_choices.cuh').read().replace('#pragma once', '')
choices = choices.replace('#include "kernels/depthwise_kernels.cuh"', kernels)
choices = choices.replace('#include "kernels/depthwise_plane.cuh"', plane)
choices = choices.replace('#include "kernels/depthwise_mma.cuh"', mma)
choices = choices.replace('#include "kernels/depthwise_mma_filter.cuh"', mma_filter)
src = open(sys.argv[1]).read()
src = src.replace('#include "kernels/depthwise_choices.cuh"', choices)
if len(sys.argv) > 3:
    sweep = open(sys.argv[3]).read().replace('#pragma once', '')
    sweep = sweep.replace('#include "kernels/depthwise_choices.cuh"', '')
    sweep = sweep.replace('#include "kernels/depthwise_plane.cuh"', '')
    sweep = sweep.replace('#include "kernels/depthwise_mma.cuh"', '')
    sweep = sweep.replace('#include "kernels/depthwise_mma_filter.cuh"', '')
    declarations = '#define DW_SWEEP_DECLARATIONS_ONLY 1\n' if sys.argv[4:] == ['declarations'] else ''
    src += '\n#define TORCH_CUDNN_ALGO_DW_SWEEP 1\n#define DW_SWEEP_PART -1\n' + declarations + sweep
rewrite = Rewrite(src)
sub = rewrite.sub
sub(r'extern __shared__ __align__\(16\) float (\w+)\[\];', r'float* \1 = reinterpret_cast<float*>(emu_shared());', 3)
sub(r'extern __shared__ __align__\(16\) uint32_t (\w+)\[\];', r'uint32_t* \1 = reinterpret_cast<uint32_t*>(emu_shared());', 2)
sub(r'kernel<<<grid, block, shared, stream>>>\(args\.\.\.\);', 'emu_launch(kernel, grid, block, shared, stream, args...);', 1)
# Each kernel notes its instantiation (which paths the cases reached).
sub(r'(__global__ void __launch_bounds__\((?:[^()]|\([^()]*\))*\)\s*dw_\w+\([^{]*\{)', r'\1 emu_note(__PRETTY_FUNCTION__);', 5)
rewrite.write(sys.argv[2], forbidden=('<<<', 'asm'))
