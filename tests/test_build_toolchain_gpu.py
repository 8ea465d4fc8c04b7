"""GPU: what crashed with the GPU image's compiler (a static libstdc++ linked in;
the build rule itself: test_build_toolchain.py) runs in a fresh process with the installed
extension: pinned convolutions, their C++-formatted log lines and refusal warnings."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.gpu


def test_convolutions_and_messages_run_in_a_fresh_process():
    """What crashed with the GPU image's compiler (a static libstdc++ linked in): pinned
    convolutions, their C++-formatted log lines and refusal warnings. A crash is a
    negative return code, not a failed pytest."""
    code = textwrap.dedent("""
        import logging, warnings
        import torch, torch_cudnn_algo as tca
        logging.basicConfig(level=logging.INFO)
        assert tca.is_available(), tca.load_error()
        cudnn = torch.backends.cudnn
        x = torch.randn(8, 16, 20, 20, device="cuda", requires_grad=True)
        w = torch.randn(32, 16, 3, 3, device="cuda", requires_grad=True)
        ref = torch.nn.functional.conv2d(x, w, padding=1)
        cudnn.conv_fwd_algo, cudnn.conv_bwd_data_algo, cudnn.conv_bwd_filter_algo = 1, 1, 1
        y = torch.nn.functional.conv2d(x, w, padding=1)
        y.sum().backward()
        torch.testing.assert_close(y, ref, rtol=1e-2, atol=1e-2)
        cudnn.conv_fwd_algo = "eng0"
        torch.nn.functional.conv2d(x, w, padding=1)
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            cudnn.conv_fwd_algo = 4  # FFT: may be refused, which formats a warning in C++
            torch.nn.functional.conv2d(x, w, padding=1, stride=2)
        print(tca.diagnostics.legacy_workspace_sizes("fwd", x, w, padding=1))
        print(len(tca.diagnostics.engine_configs("fwd", x, w, padding=1)))
        torch.cuda.synchronize()
        print("OK")
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd="/")
    assert result.returncode == 0 and result.stdout.rstrip().endswith("OK"), (
        f"return code {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
