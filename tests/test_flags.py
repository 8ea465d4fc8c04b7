"""CPU: flag values, normalisation, errors, the flags() context manager, and the
agreement of the Python and C++ algorithm tables."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import torch_cudnn_algo
from torch_cudnn_algo import _ops
from torch_cudnn_algo._algorithms import DIRECTIONS

cudnn = torch.backends.cudnn


@pytest.mark.parametrize(
    "value, canonical",
    [
        (None, None),
        (0, 0),
        (7, 7),
        (np.int64(5), 5),
        ("1", 1),
        (" 3 ", 3),
        ("IMPLICIT_PRECOMP_GEMM", 1),
        ("implicit_precomp_gemm", 1),
        ("Winograd_Nonfused", 7),
        ("CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING", 5),
        ("cudnn_convolution_fwd_algo_gemm", 2),
    ],
)
def test_forward_flag_accepts_and_normalises(value, canonical):
    cudnn.conv_fwd_algo = value
    assert cudnn.conv_fwd_algo == canonical
    assert type(cudnn.conv_fwd_algo) is type(canonical)


@pytest.mark.parametrize(
    "value, message",
    [
        (8, "8 is out of range"),
        (-1, "-1 is out of range"),
        ("9", "9 is out of range"),
        ("BOGUS", "unknown algorithm 'BOGUS'"),
        ("CUDNN_CONVOLUTION_BWD_DATA_ALGO_0", "unknown algorithm"),
        (1.0, "does not take a float"),
        (True, "does not take a bool"),
        ([1], "does not take a list"),
    ],
)
def test_forward_flag_rejects_bad_values_and_keeps_previous(value, message):
    cudnn.conv_fwd_algo = "GEMM"
    with pytest.raises(ValueError, match=message) as info:
        cudnn.conv_fwd_algo = value
    assert "0 (IMPLICIT_GEMM)" in str(info.value) and "7 (WINOGRAD_NONFUSED)" in str(info.value)
    assert cudnn.conv_fwd_algo == 2


@pytest.mark.parametrize("flag", ["conv_fwd_algo", "conv_bwd_data_algo", "conv_bwd_filter_algo"])
@pytest.mark.parametrize("value", ["fastest", "FASTEST", " Fastest "])
def test_fastest_policy_is_accepted_and_reaches_the_extension(flag, value):
    setattr(cudnn, flag, value)
    assert getattr(cudnn, flag) == "fastest"
    key = {"conv_fwd_algo": "fwd", "conv_bwd_data_algo": "bwd_data", "conv_bwd_filter_algo": "bwd_filter"}[flag]
    ops = _ops
    assert ops.get_policy(key) == "fastest"
    assert ops.get_legacy_algo(key) == -1 and ops.get_engine(key) == ""
    assert "aten::convolution_backward" in torch_cudnn_algo.diagnostics.active_overrides()
    setattr(cudnn, flag, None)
    assert ops.get_policy(key) == "" and torch_cudnn_algo.diagnostics.active_overrides() == []


def test_unknown_policy_is_rejected_by_the_extension():
    with pytest.raises(ValueError, match="the only policy is 'fastest'"):
        _ops.set_policy("fwd", "slowest")
    assert _ops.get_policy("fwd") == ""


@pytest.mark.parametrize("value, canonical", [(None, None), (0, 0), (1 << 30, 1 << 30), (np.int64(4096), 4096)])
def test_workspace_limit_accepts_bytes_or_none(value, canonical):
    cudnn.conv_workspace_limit = value
    assert cudnn.conv_workspace_limit == canonical
    assert _ops.get_workspace_limit() == (-1 if canonical is None else canonical)


@pytest.mark.parametrize("value", [-1, 1.5, "1GiB", True, [1]])
def test_workspace_limit_rejects_bad_values_and_keeps_previous(value):
    cudnn.conv_workspace_limit = 1024
    with pytest.raises(ValueError, match=r"number of bytes \(an int >= 0\) or None"):
        cudnn.conv_workspace_limit = value
    assert cudnn.conv_workspace_limit == 1024
    assert _ops.get_workspace_limit() == 1024


def test_conv_profile_registers_every_override_and_removes_them():
    cudnn.conv_profile = True
    assert _ops.get_profile()
    assert set(torch_cudnn_algo.diagnostics.active_overrides()) == {
        "aten::cudnn_convolution", "aten::cudnn_convolution_transpose", "aten::convolution_backward"}
    with pytest.raises(ValueError, match="must be True or False"):
        cudnn.conv_profile = "yes"
    assert cudnn.conv_profile is True
    cudnn.conv_profile = False
    assert torch_cudnn_algo.diagnostics.active_overrides() == []


@pytest.mark.parametrize("flag", ["conv_fwd_algo", "conv_bwd_data_algo", "conv_bwd_filter_algo"])
@pytest.mark.parametrize(
    "value, canonical",
    [
        ("eng62", "eng62"),
        ("ENG0", "eng0"),
        (" Eng62_K13=1_k2=1 ", "eng62_k2=1_k13=1"),
        ("eng62_k2=1_k13=1_k18=0_k25=0_k27=1_k28=8", "eng62_k2=1_k13=1_k18=0_k25=0_k27=1_k28=8"),
        ("eng7_k5=-1", "eng7_k5=-1"),
    ],
)
def test_engine_names_are_pinned_and_normalised(flag, value, canonical):
    setattr(cudnn, flag, value)
    assert getattr(cudnn, flag) == canonical
    direction = {"conv_fwd_algo": "fwd", "conv_bwd_data_algo": "bwd_data", "conv_bwd_filter_algo": "bwd_filter"}[flag]
    assert _ops.get_engine(direction) == canonical
    assert _ops.get_legacy_algo(direction) == -1
    assert "aten::convolution_backward" in torch_cudnn_algo.diagnostics.active_overrides()
    setattr(cudnn, flag, 1)  # switching back to a legacy algorithm replaces the engine
    assert _ops.get_engine(direction) == ""


@pytest.mark.parametrize("flag", ["conv_fwd_algo", "conv_bwd_data_algo", "conv_bwd_filter_algo"])
@pytest.mark.parametrize("value", ["tca.direct", " TCA.Direct "])
def test_our_kernel_is_pinned_by_its_name(flag, value):
    setattr(cudnn, flag, value)
    assert getattr(cudnn, flag) == "tca.direct"
    direction = {"conv_fwd_algo": "fwd", "conv_bwd_data_algo": "bwd_data", "conv_bwd_filter_algo": "bwd_filter"}[flag]
    assert _ops.get_engine(direction) == "tca.direct"
    assert _ops.get_legacy_algo(direction) == -1
    assert "aten::convolution_backward" in torch_cudnn_algo.diagnostics.active_overrides()
    setattr(cudnn, flag, None)
    assert _ops.get_engine(direction) == ""


@pytest.mark.parametrize(
    "value, message",
    [("eng62_k2", "knob 'k2' has no value"), ("eng62_k2=1_k2=3", "sets a knob twice"), ("eng", "unknown algorithm"),
     ("engine62", "unknown algorithm"), ("eng62_x2=1", "'x2=1' is not a knob")],
)
def test_malformed_engine_names_are_rejected(value, message):
    cudnn.conv_fwd_algo = "eng3"
    with pytest.raises(ValueError, match=message):
        cudnn.conv_fwd_algo = value
    assert cudnn.conv_fwd_algo == "eng3"


@pytest.mark.parametrize("name", ["eng62", "ENG62_k13=1_k2=1", "eng0_k1=-3_k28=8_k2=0"])
def test_python_and_cpp_engine_names_agree(name):
    from torch_cudnn_algo._algorithms import canonical_engine_name

    assert _ops.canonical_engine_name(name) == canonical_engine_name(name)


def test_extension_rejects_malformed_engine_names():
    with pytest.raises(ValueError, match="not an engine configuration name"):
        _ops.set_engine("fwd", "eng62_k2")
    assert _ops.get_engine("fwd") == ""


def test_strict_flag_takes_bools_only():
    assert cudnn.conv_algo_strict is False
    cudnn.conv_algo_strict = True
    assert cudnn.conv_algo_strict is True
    assert _ops.get_strict() is True
    for bad in (1, "yes", None):
        with pytest.raises(ValueError, match="conv_algo_strict must be True or False"):
            cudnn.conv_algo_strict = bad
        assert cudnn.conv_algo_strict is True
    cudnn.conv_algo_strict = np.bool_(False)
    assert cudnn.conv_algo_strict is False


@pytest.mark.parametrize(
    "flag, value, canonical",
    [
        ("conv_bwd_data_algo", "ALGO_1", 1),
        ("conv_bwd_data_algo", "cudnn_convolution_bwd_data_algo_winograd_nonfused", 5),
        ("conv_bwd_data_algo", 0, 0),
        ("conv_bwd_filter_algo", "fft_tiling", 6),
        ("conv_bwd_filter_algo", "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3", 3),
        ("conv_bwd_filter_algo", "cudnn_convolution_bwd_filter_algo_fft", 2),
        ("conv_bwd_data_algo", "CUDNN_CONVOLUTION_BWD_DATA_ALGO_0", 0),
        ("conv_bwd_filter_algo", 5, 5),
    ],
)
def test_backward_flags_accept_and_normalise(flag, value, canonical):
    setattr(cudnn, flag, value)
    assert getattr(cudnn, flag) == canonical
    direction = {"conv_bwd_data_algo": "bwd_data", "conv_bwd_filter_algo": "bwd_filter"}[flag]
    assert _ops.get_legacy_algo(direction) == canonical


@pytest.mark.parametrize(
    "flag, value, message",
    [
        ("conv_bwd_data_algo", 6, "6 is out of range"),
        ("conv_bwd_data_algo", "IMPLICIT_GEMM", "unknown algorithm"),
        ("conv_bwd_filter_algo", 4, "not implemented by cuDNN"),
        ("conv_bwd_filter_algo", "WINOGRAD", "not implemented by cuDNN"),
        ("conv_bwd_filter_algo", 7, "7 is out of range"),
    ],
)
def test_backward_flags_reject_bad_values(flag, value, message):
    setattr(cudnn, flag, 1)
    with pytest.raises(ValueError, match=message) as info:
        setattr(cudnn, flag, value)
    valid = str(info.value).split("valid values are")[1]
    assert ("4 (WINOGRAD)" in valid) == (flag == "conv_bwd_data_algo")
    assert getattr(cudnn, flag) == 1


def test_flag_reaches_the_extension():
    cudnn.conv_fwd_algo = "FFT"
    assert _ops.get_legacy_algo("fwd") == 4
    cudnn.conv_fwd_algo = None
    assert _ops.get_legacy_algo("fwd") == -1


def test_flags_context_manager_restores_even_on_error():
    cudnn.conv_fwd_algo = 2
    with pytest.raises(KeyError):
        with torch_cudnn_algo.flags(conv_fwd_algo="DIRECT", conv_bwd_data_algo=1, conv_bwd_filter_algo=3,
                                    conv_algo_strict=True):
            assert (cudnn.conv_fwd_algo, cudnn.conv_bwd_data_algo, cudnn.conv_bwd_filter_algo) == (3, 1, 3)
            assert cudnn.conv_algo_strict is True
            raise KeyError("boom")
    assert (cudnn.conv_fwd_algo, cudnn.conv_algo_strict) == (2, False)
    assert (cudnn.conv_bwd_data_algo, cudnn.conv_bwd_filter_algo) == (None, None)


def test_flags_context_manager_validates_everything_first():
    with pytest.raises(ValueError):
        with torch_cudnn_algo.flags(conv_fwd_algo=1, conv_algo_strict="yes"):
            pass
    assert cudnn.conv_fwd_algo is None
    assert torch_cudnn_algo.diagnostics.active_overrides() == []


@pytest.mark.parametrize("direction", list(DIRECTIONS))
def test_python_and_cpp_algorithm_tables_agree(direction):
    assert list(_ops.legacy_algo_names(direction)) == list(DIRECTIONS[direction].names)


def test_extension_rejects_bad_values_too():
    with pytest.raises(ValueError, match=r"must be in \[0, 8\)"):
        _ops.set_legacy_algo("fwd", 8)
    with pytest.raises(ValueError, match="not implemented by cuDNN"):
        _ops.set_legacy_algo("bwd_filter", 4)
    with pytest.raises(ValueError, match="unknown direction 'sideways'"):
        _ops.set_legacy_algo("sideways", 1)
    assert _ops.get_legacy_algo("fwd") == -1


def test_legacy_algorithm_names():
    assert torch_cudnn_algo.diagnostics.legacy_algorithm_names()[1] == "IMPLICIT_PRECOMP_GEMM"
    with pytest.raises(ValueError, match="unknown direction"):
        torch_cudnn_algo.diagnostics.legacy_algorithm_names("up")


def test_knob_search_flag_takes_bools_and_reaches_the_extension():
    assert cudnn.conv_knob_search is False
    cudnn.conv_knob_search = True
    assert _ops.get_knob_search()
    with pytest.raises(ValueError, match="conv_knob_search must be True or False"):
        cudnn.conv_knob_search = "yes"
    assert cudnn.conv_knob_search is True
    with torch_cudnn_algo.flags(conv_knob_search=False):
        assert not _ops.get_knob_search()
    assert _ops.get_knob_search()
    cudnn.conv_knob_search = False
    assert not _ops.get_knob_search()
    # Not a choice: no override is registered for it.
    assert torch_cudnn_algo.diagnostics.active_overrides() == []


@pytest.mark.parametrize("name", sorted(torch_cudnn_algo.TOLERANCES))
def test_tuner_and_profile_table_tolerances_agree(name):
    dtype, _, math = name.partition("+")
    assert _ops.tuner_tolerance(dtype, math == "tf32") == torch_cudnn_algo.TOLERANCES[name]


def test_tuner_tolerance_rejects_unknown_dtypes():
    with pytest.raises(ValueError, match="no tuner tolerance for dtype 'int8'"):
        _ops.tuner_tolerance("int8", False)


def test_tuning_log_starts_empty_and_clear_cache_empties_it():
    assert torch_cudnn_algo.diagnostics.tuning_log() == []
    torch_cudnn_algo.clear_cache()
    assert torch_cudnn_algo.diagnostics.tuning_log() == []
