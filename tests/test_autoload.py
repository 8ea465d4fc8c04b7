"""CPU: `import torch` registers the flags through the torch.backends entry
point; env vars pin choices; nothing that goes wrong can fail `import torch`.
Each case runs in a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

PROBE = """
import json, warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    {imports}
    import torch
    cudnn = torch.backends.cudnn
    state = {{
        "has_flags": hasattr(type(cudnn), "conv_fwd_algo"),
        "fwd": getattr(cudnn, "conv_fwd_algo", "missing"),
        "strict": getattr(cudnn, "conv_algo_strict", "missing"),
        "overrides": list(torch.ops.torch_cudnn_algo.active_overrides())
        if hasattr(type(cudnn), "conv_fwd_algo") and "torch_cudnn_algo._C" in __import__("sys").modules else None,
    }}
    {extra}
state["warnings"] = [str(w.message) for w in caught]
print("STATE" + json.dumps(state))
"""

# Makes the given modules fail to import, as a broken install would.
BLOCK_MODULES = """
import sys
class _Blocker:
    def find_spec(self, name, path=None, target=None):
        if name in {names!r}:
            raise ImportError("simulated broken install of " + name)
sys.meta_path.insert(0, _Blocker())
"""


def run_probe(imports: str = "", extra: str = "", env: dict[str, str] | None = None, prelude: str = "") -> dict:
    code = prelude + PROBE.format(imports=imports or "pass", extra=extra or "pass")
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_CUDNN_")}
    full_env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    full_env.update(env or {})
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=300, cwd="/"
    )
    assert result.returncode == 0, result.stderr
    (line,) = [l for l in result.stdout.splitlines() if l.startswith("STATE")]
    state = json.loads(line[len("STATE"):])
    state["stderr"] = result.stderr
    return state


def test_import_torch_alone_registers_the_flags():
    state = run_probe(extra="cudnn.conv_fwd_algo = 'IMPLICIT_PRECOMP_GEMM'; state['after_set'] = cudnn.conv_fwd_algo; "
                            "state['overrides'] = list(torch.ops.torch_cudnn_algo.active_overrides())")
    assert state["has_flags"] and state["fwd"] is None and state["strict"] is False
    assert state["after_set"] == 1
    assert state["overrides"] == ["aten::cudnn_convolution", "aten::convolution_backward"]
    assert state["warnings"] == []
    assert "Overriding a previously registered kernel" not in state["stderr"]


def test_autoload_can_be_disabled_and_explicit_import_still_works():
    state = run_probe(env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert not state["has_flags"]
    state = run_probe(env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}, extra="import torch_cudnn_algo; state['late'] = hasattr(type(cudnn), 'conv_fwd_algo')")
    assert state["late"] is True


def test_importing_the_package_first_does_not_recurse():
    state = run_probe(imports="import torch_cudnn_algo")
    assert state["has_flags"] and state["warnings"] == []


def test_environment_variables_pin_choices_at_autoload():
    state = run_probe(env={"TORCH_CUDNN_CONV_FWD_ALGO": "cudnn_convolution_fwd_algo_fft_tiling",
                           "TORCH_CUDNN_CONV_ALGO_STRICT": "yes"})
    assert (state["fwd"], state["strict"]) == (5, True)
    assert state["overrides"] == ["aten::cudnn_convolution", "aten::convolution_backward"]
    state = run_probe(env={"TORCH_CUDNN_CONV_FWD_ALGO": "2", "TORCH_CUDNN_CONV_ALGO_STRICT": "0"})
    assert (state["fwd"], state["strict"]) == (2, False)
    state = run_probe(env={"TORCH_CUDNN_CONV_FWD_ALGO": "none"})
    assert state["fwd"] is None and state["overrides"] == []
    state = run_probe(
        env={"TORCH_CUDNN_CONV_BWD_DATA_ALGO": "fft_tiling", "TORCH_CUDNN_CONV_BWD_FILTER_ALGO": "ALGO_1"},
        extra="state['bwd'] = (cudnn.conv_bwd_data_algo, cudnn.conv_bwd_filter_algo)",
    )
    assert state["bwd"] == [3, 1]
    assert state["overrides"] == ["aten::cudnn_convolution_transpose", "aten::convolution_backward"]


@pytest.mark.parametrize(
    "env, needle",
    [({"TORCH_CUDNN_CONV_FWD_ALGO": "warp_speed"}, "TORCH_CUDNN_CONV_FWD_ALGO='warp_speed'"),
     ({"TORCH_CUDNN_CONV_ALGO_STRICT": "maybe"}, "TORCH_CUDNN_CONV_ALGO_STRICT='maybe'")],
)
def test_bad_environment_values_warn_and_are_ignored(env, needle):
    state = run_probe(env=env)
    assert state["has_flags"] and state["fwd"] is None and state["strict"] is False
    assert len(state["warnings"]) == 1 and needle in state["warnings"][0]


@pytest.mark.parametrize("env", [{"TORCH_CUDNN_CONV_FWD_ALGO": "warp_speed"},
                                 {"TORCH_CUDNN_ALGO_PLAN": "/nonexistent/plan.json"}])
def test_environment_warnings_say_where_the_value_came_from(env):
    # Not a line of torch_cudnn_algo/__init__.py (where autoload reads it): the environment.
    state = run_probe(env=env, extra="state['where'] = [(w.filename, w.lineno, w.category.__name__) for w in caught]")
    ((variable, value),) = env.items()
    assert state["where"] == [["<environment>", 0, "UserWarning"]]
    assert state["warnings"][0].startswith(f"torch_cudnn_algo: ignoring environment variable {variable}={value!r}: ")


def test_environment_warning_prints_as_one_plain_line():
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_CUDNN_")}
    env["TORCH_CUDNN_CONV_ALGO_STRICT"] = "maybe"
    result = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, text=True, env=env,
                            timeout=300, cwd="/")
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith("<environment>:0: UserWarning: torch_cudnn_algo: ignoring environment variable "
                                    "TORCH_CUDNN_CONV_ALGO_STRICT='maybe': "), result.stderr
    assert "__init__.py" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_environment_value_without_the_extension_names_the_variable():
    state = run_probe(prelude=BLOCK_MODULES.format(names=("torch_cudnn_algo._C",)),
                      env={"TORCH_CUDNN_CONV_FWD_ALGO": "1"},
                      extra="state['where'] = [w.filename for w in caught]")
    assert state["fwd"] == 1  # inert, but read back as set
    (from_environment,) = [w for w in state["warnings"] if "TORCH_CUDNN_CONV_FWD_ALGO" in w]
    assert from_environment.startswith("torch_cudnn_algo: ignoring environment variable "
                                       "TORCH_CUDNN_CONV_FWD_ALGO='1': no effect: ")
    assert len(state["warnings"]) == 2 and any("C++ extension could not be loaded" in w for w in state["warnings"])
    assert state["where"][state["warnings"].index(from_environment)] == "<environment>"


def test_value_assigned_before_the_flags_existed_is_honoured():
    state = run_probe(
        env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
        extra="cudnn.conv_fwd_algo = 'gemm'; import torch_cudnn_algo; state['late'] = cudnn.conv_fwd_algo; "
              "state['overrides'] = list(torch.ops.torch_cudnn_algo.active_overrides())",
    )
    assert state["late"] == 2 and state["overrides"] == ["aten::cudnn_convolution", "aten::convolution_backward"]


def test_missing_extension_gives_one_warning_and_inert_flags():
    state = run_probe(
        prelude=BLOCK_MODULES.format(names=("torch_cudnn_algo._C",)),
        extra=textwrap.dedent("""
            state['import_warnings'] = len(caught)
            cudnn.conv_fwd_algo = 1
            state['inert_value'] = cudnn.conv_fwd_algo
            try:
                cudnn.conv_fwd_algo = 42
            except ValueError:
                state['still_validates'] = True
            import torch_cudnn_algo
            state['available'] = torch_cudnn_algo.is_available()
        """).replace("\n", "\n    "),
    )
    assert state["import_warnings"] == 1
    assert "C++ extension could not be loaded" in state["warnings"][0]
    assert "simulated broken install" in state["warnings"][0]
    assert state["inert_value"] == 1 and state["still_validates"] and state["available"] is False
    assert any("has no effect" in w for w in state["warnings"][1:])


def test_broken_package_never_fails_import_torch():
    state = run_probe(prelude=BLOCK_MODULES.format(names=("torch_cudnn_algo._flags",)))
    assert not state["has_flags"]
    assert len(state["warnings"]) == 1 and "autoload failed" in state["warnings"][0]


def test_policy_limit_and_profile_from_the_environment():
    state = run_probe(
        env={"TORCH_CUDNN_CONV_FWD_ALGO": "Fastest", "TORCH_CUDNN_CONV_WORKSPACE_LIMIT": "1048576",
             "TORCH_CUDNN_CONV_PROFILE": "on"},
        extra='state["limit"] = cudnn.conv_workspace_limit; state["profile"] = cudnn.conv_profile; '
              'state["policy"] = torch.ops.torch_cudnn_algo.get_policy("fwd")',
    )
    assert state["fwd"] == "fastest" and state["policy"] == "fastest"
    assert state["limit"] == 1048576 and state["profile"] is True
    assert "aten::cudnn_convolution_transpose" in state["overrides"]  # conv_profile watches every direction
    assert state["warnings"] == []


def test_bad_workspace_limit_in_the_environment_is_one_warning():
    state = run_probe(env={"TORCH_CUDNN_CONV_WORKSPACE_LIMIT": "lots"},
                      extra='state["limit"] = cudnn.conv_workspace_limit')
    assert state["limit"] is None
    assert any("TORCH_CUDNN_CONV_WORKSPACE_LIMIT='lots'" in w for w in state["warnings"]), state["warnings"]


@pytest.mark.parametrize("setting, shown", [("+torch_cudnn_algo", True), ("torch_cudnn_algo", True), (None, False)])
def test_torch_logs_shows_our_lines(setting, shown, monkeypatch):
    monkeypatch.delenv("TORCH_LOGS", raising=False)  # (torch itself fails on TORCH_LOGS="")
    state = run_probe(
        env={} if setting is None else {"TORCH_LOGS": setting},
        extra='cudnn.conv_fwd_algo = 1; cudnn.conv_fwd_algo = None; '
              'from torch._logging import _internal; '
              'state["registered"] = "torch_cudnn_algo" in _internal.log_registry.log_alias_to_log_qnames',
    )
    assert state["registered"]
    assert ("registered override of aten::cudnn_convolution" in state["stderr"]) == shown, state["stderr"]


@pytest.mark.parametrize("case", ["bad algorithm", "bad knob value", "garbage plan file", "missing extension",
                                  "broken package"])
def test_import_torch_under_W_error_reports_and_never_fails(case, tmp_path):
    # `python -W error` turns warnings into exceptions; what autoload reports must still
    # reach stderr, and `import torch` must still succeed.
    plan = tmp_path / "plan.json"
    plan.write_text("garbage")
    env, prelude, needle = {
        "bad algorithm": ({"TORCH_CUDNN_CONV_FWD_ALGO": "warp"}, "", "TORCH_CUDNN_CONV_FWD_ALGO='warp'"),
        "bad knob value": ({"TORCH_CUDNN_CONV_BWD_DATA_ALGO": "eng62_k2=banana"}, "",
                           "knob 'k2' has the value 'banana', which is not an integer"),
        "garbage plan file": ({"TORCH_CUDNN_ALGO_PLAN": str(plan)}, "", f"TORCH_CUDNN_ALGO_PLAN='{plan}'"),
        "missing extension": ({}, BLOCK_MODULES.format(names=("torch_cudnn_algo._C",)),
                              "C++ extension could not be loaded"),
        "broken package": ({}, BLOCK_MODULES.format(names=("torch_cudnn_algo._flags",)), "autoload failed"),
    }[case]
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_CUDNN_")}
    full_env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    full_env.update(env)
    code = prelude + "import torch\nprint('imported', getattr(torch.backends.cudnn, 'conv_fwd_algo', 'missing'))\n"
    result = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True, text=True,
                            env=full_env, timeout=300, cwd="/")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("imported "), result.stdout
    assert needle in result.stderr and "Traceback" not in result.stderr, result.stderr
