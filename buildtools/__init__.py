"""Build-only code of setup.py and scripts/: never installed (the wheel holds src/ only).

setup.py and the scripts load this folder by path, as the package
``_torch_cudnn_algo_buildtools``. Standard library only: setup.py hands in what it knows of
torch, and tests check every rule on a machine without a GPU or a CUDA toolkit.

- torch_support.py  which torch a build accepts; the wheel's version and torch requirement
- dependencies.py   where cuDNN, its frontend, CUDA's headers and runtime and nvcc are found
- toolchain.py      the C++ compiler, chosen for the libstdc++ this Python loads; its link rules
- cuda_kernels.py   our CUDA kernels: whether, with which nvcc, for which architectures, and how
- build_info.py     what a build is made for: the banner it prints and _build_info.py
- elf.py            a linked library's sections and the libraries it links
- version_gate.py   the runtime's version gate (the supported releases, the version rules)
"""
