# What the emulation's rewrites of a kernel file share (transform_*.py): every
# rewrite must match exactly as counted, so a change in the kernel file that
# the emulation would silently miss fails here instead, and no CUDA-only syntax
# may be left for g++.
import re
import sys


class Rewrite:
    def __init__(self, src: str) -> None:
        self.src = src

    def sub(self, pattern: str, repl: str, count: int) -> None:
        new, n = re.subn(pattern, repl, self.src)
        if n != count:
            sys.exit(f"transform: {pattern!r} matched {n} times, expected {count}")
        self.src = new

    def write(self, path: str, forbidden: tuple[str, ...] = ('<<<', 'asm volatile')) -> None:
        if any(token in self.src for token in forbidden):
            sys.exit("transform: CUDA-only syntax left")
        with open(path, 'w') as out:
            out.write(self.src)


def inline_slice_sum(src: str, note: bool = False) -> str:
    """src with csrc/kernels/slice_sum.cuh (the filter kernels' shared finish) inlined at its
    include, rewritten for the emulation; with note, the kernel notes its instantiation."""
    header = Rewrite(open('csrc/kernels/slice_sum.cuh').read().replace('#pragma once', ''))
    header.sub(r'extern __shared__ __align__\(16\) unsigned char slice_sum_shared\[\];',
               'unsigned char* slice_sum_shared = emu_shared();', 1)
    header.sub(r'sum_slices<Acc, Store><<<dim3\(static_cast<unsigned>\(blocks\)\), dim3\(kSliceSumThreads\),\s*'
               r'kSliceSumThreads \* sizeof\(Acc\), stream>>>\(',
               'emu_launch(sum_slices<Acc, Store>, dim3(static_cast<unsigned>(blocks)), kSliceSumThreads, '
               'kSliceSumThreads * sizeof(Acc), stream, ', 1)
    header.sub(r'sum_few_slices<Acc, Store><<<dim3\(static_cast<unsigned>\(blocks\)\), dim3\(kFewSlicesThreads\), 0, '
               r'stream>>>\(',
               'emu_launch(sum_few_slices<Acc, Store>, dim3(static_cast<unsigned>(blocks)), kFewSlicesThreads, 0, '
               'stream, ', 1)
    if note:
        header.sub(r'(sum_slices\(const Acc\* __restrict__ partial[^{]*\{)', r'\1 emu_note(__PRETTY_FUNCTION__);', 1)
        header.sub(r'(sum_few_slices\(const Acc\* __restrict__ partial[^{]*\{)', r'\1 emu_note(__PRETTY_FUNCTION__);',
                   1)
    include = '#include "kernels/slice_sum.cuh"'
    if src.count(include) != 1:
        sys.exit(f"transform: {include} found {src.count(include)} times, expected 1")
    return src.replace(include, header.src)


def inline_async_copy(src: str) -> str:
    """src with csrc/kernels/async_copy.cuh (the cp.async helpers) inlined at its include, its
    PTX replaced by the emulation's copies (fake/cuda_runtime.h: emu_cp_async, emu_commit,
    emu_wait)."""
    header = Rewrite(open('csrc/kernels/async_copy.cuh').read().replace('#pragma once', ''))
    header.sub(r'#if defined\(__CUDA_ARCH__\) && __CUDA_ARCH__ >= 800', '#if 1', 3)
    header.sub(r'const unsigned to = static_cast<unsigned>\(__cvta_generic_to_shared\(shared\)\);\s*'
               r'asm volatile\("cp\.async\.ca\.shared\.global \[%0\], \[%1\], 16, %2;\\n" ::"r"\(to\), '
               r'"l"\(global\), "r"\(live \? 16 : 0\)\s*: "memory"\);',
               'emu_cp_async(shared, global, live);', 1)
    header.sub(r'asm volatile\("cp\.async\.commit_group;\\n" ::: "memory"\);', 'emu_commit();', 1)
    header.sub(r'asm volatile\("cp\.async\.wait_group %0;\\n" ::"n"\(Pending\) : "memory"\);',
               'emu_wait(Pending);', 1)
    include = '#include "kernels/async_copy.cuh"'
    if src.count(include) != 1:
        sys.exit(f"transform: {include} found {src.count(include)} times, expected 1")
    return src.replace(include, header.src)


def inline_mma_sync(src: str) -> str:
    """src with csrc/kernels/mma_sync.cuh (mma.sync m16n8k16) inlined at its include, its PTX
    replaced by the emulation's warp-wide multiply (fake/mma_sync.h: emu_mma_16816)."""
    header = Rewrite(open('csrc/kernels/mma_sync.cuh').read().replace('#pragma once', ''))
    header.sub(r'(?s)#if defined\(__CUDA_ARCH__\) && __CUDA_ARCH__ >= 800\n.*?#endif\n',
               'emu_mma_16816<T>(d, a, b);\n', 1)
    include = '#include "kernels/mma_sync.cuh"'
    if src.count(include) != 1:
        sys.exit(f"transform: {include} found {src.count(include)} times, expected 1")
    return src.replace(include, '#include "mma_sync.h"\n' + header.src)
