"""GPU: PyTorch's own test inputs under every pinned choice.

The sample inputs of the OpInfos ``nn.functional.conv{1,2,3}d`` and
``nn.functional.conv_transpose{1,2,3}d`` (``common_methods_invocations.op_db``) and
the inputs of the Conv/ConvTranspose ModuleInfos (``common_modules.module_db``),
which ship in the torch wheel, run on CUDA under each legacy algorithm of each
direction, the engines ``eng0`` and (per sample) the first configuration
``engine_configs`` lists, and the ``"fastest"`` policy. Each sample's output and
gradients (input, weight, bias) are compared with stock PyTorch on the same inputs
and with a float64 CPU reference: a pinned result passes when its relative error
is at most ``ERROR_FACTOR`` times stock's, or within a floor set by the dtype and
the algorithm family; its dtype, shape and strides must be stock's exactly.

These samples are unbatched, use ``padding="same"``/``"valid"``, groups, dilation,
output padding; variants add non-contiguous (NaN-interleaved) and channels-last
operands. A sample cuDNN cannot run with the choice (strict error), or that
PyTorch does not send to cuDNN in the pinned direction (``pinned_run_counts`` did
not move), does not count as run. A test none of whose samples ran fails, except
under a specialised legacy algorithm (GEMM, DIRECT, FFT, Winograd) that cuDNN
implements for none of its samples: there every sample must have been refused by
the strict rule, which is what that test checks. The subsets (``first``,
``fastest``) are taken among the configurations PyTorch sends to cuDNN. Samples loop
inside one test per (op, dtype, setting); failures are collected with each sample's
description.

Transposed convolutions follow cuDNN: their forward runs the ``bwd_data`` choice,
their input gradient the ``fwd`` choice. Every sample runs forward and backward,
so whichever pass a direction maps to is exercised.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib
import warnings
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
import torch
import torch.nn.functional as F

import torch_cudnn_algo
from conv_cases import DTYPES, TRANSFORM_ALGOS, TRANSFORM_TOLERANCE, DtypeCase
from torch_cudnn_algo._algorithms import DIRECTIONS

pytestmark = pytest.mark.gpu

FLAG = {key: spec.flag for key, spec in DIRECTIONS.items()}

# A pinned result passes when its relative error against float64 is within
# ERROR_FACTOR x stock's error on the same sample, or within the setting's floor.
ERROR_FACTOR = 10.0
# Stock PyTorch itself must be this close to the float64 reference, or the harness
# (reference, inputs) is broken; it also caps what ERROR_FACTOR x stock may allow.
STOCK_SANITY = 5e-2

# Cost bounds: "first" lists every engine configuration of a sample (~0.1-0.5 s),
# "fastest" profiles every candidate (~1 s per configuration and direction). Both
# run on these many distinct cuDNN configurations per op (each with its unbatched twin).
FIRST_ENGINE_CONFIGS_PER_OP = 2
FASTEST_CONFIGS_PER_OP = 2

COMPLEX64 = DtypeCase("complex64", torch.complex64, allow_tf32=False, tolerance=2e-5)
CASES = {case.name: case for case in [*DTYPES, COMPLEX64]}

OPS = [
    "nn.functional.conv1d",
    "nn.functional.conv2d",
    "nn.functional.conv3d",
    "nn.functional.conv_transpose1d",
    "nn.functional.conv_transpose2d",
    "nn.functional.conv_transpose3d",
]
MODULES = {  # ModuleInfo name -> dtypes its ModuleInfo declares (checked at run time)
    "nn.Conv1d": ("float32", "float64"),
    "nn.Conv2d": ("float32", "float64"),
    "nn.Conv3d": ("float32", "float64"),
    "nn.ConvTranspose1d": ("float32", "float64", "complex64"),
    "nn.ConvTranspose2d": ("float32", "float64", "complex64"),
    "nn.ConvTranspose3d": ("float32", "float64", "complex64"),
}


# --------------------------------------------------------------------------- settings

UNSUPPORTED = "cannot run this convolution"  # in the strict error
FIRST = "first"  # the first usable configuration engine_configs lists, pinned by full name


@dataclass(frozen=True)
class Setting:
    direction: str
    value: int | str  # legacy algorithm, "eng0", FIRST or "fastest"

    @property
    def id(self) -> str:
        if isinstance(self.value, int):
            return f"{self.direction}-{self.value}-{DIRECTIONS[self.direction].names[self.value]}"
        return f"{self.direction}-{'first_engine_config' if self.value == FIRST else self.value}"

    @property
    def general(self) -> bool:
        """Whether cuDNN runs this choice on any convolution: legacy algorithms 0 and 1 (implicit
        GEMM) of each direction, eng0, a listed engine configuration, the "fastest" policy. The
        other legacy algorithms are specialised: cuDNN may implement one for none of a test's samples."""
        return not isinstance(self.value, int) or self.value in (0, 1)

    @property
    def subset(self) -> int | None:
        """How many configurations per op this setting runs on (None: every sample)."""
        return {FIRST: FIRST_ENGINE_CONFIGS_PER_OP, "fastest": FASTEST_CONFIGS_PER_OP}.get(self.value)


LEGACY = [Setting(d, a) for d, spec in DIRECTIONS.items() for a in range(len(spec.names))
          if a not in spec.unimplemented]
ENG0 = [Setting(d, "eng0") for d in DIRECTIONS]
FIRST_ENGINE = [Setting(d, FIRST) for d in DIRECTIONS]
FASTEST = [Setting(d, "fastest") for d in DIRECTIONS]
COMPLEX_SETTINGS = [Setting(d, 1) for d in DIRECTIONS] + ENG0  # complex runs as several real convs

OP_SETTINGS = {
    "float32": LEGACY + ENG0 + FIRST_ENGINE + FASTEST,
    "float32_tf32": LEGACY + ENG0,
    "float16": LEGACY + ENG0 + FIRST_ENGINE,
    "bfloat16": LEGACY + ENG0 + FIRST_ENGINE,
    "float64": LEGACY + ENG0,
    "complex64": COMPLEX_SETTINGS,
}
MODULE_SETTINGS = {
    "float32": LEGACY + ENG0 + FIRST_ENGINE,
    "float64": LEGACY + ENG0,
    "complex64": COMPLEX_SETTINGS,
}
# Operand layouts besides the samples as given (settings with a subset run "plain" only).
OP_VARIANTS = {"float32": ("plain", "noncontiguous", "channels_last"), "float16": ("plain", "channels_last")}
MODULE_VARIANTS = {"float32": ("plain", "noncontiguous", "channels_last")}


def op_params():
    return [pytest.param(op, CASES[dtype], setting, id=f"{op}-{dtype}-{setting.id}")
            for op in OPS for dtype, settings in OP_SETTINGS.items() for setting in settings]


def module_params():
    return [pytest.param(name, CASES[dtype], setting, id=f"{name}-{dtype}-{setting.id}")
            for name, dtypes in MODULES.items() for dtype in dtypes for setting in MODULE_SETTINGS[dtype]]


# ------------------------------------------------------------------ upstream databases


@functools.cache
def _upstream():
    """(op_db, module_db, noncontiguous_like), imported on first use: the import
    takes seconds, and ``common_utils`` freezes torch.backends' global flags and
    patches TorchScript's ``__call__`` at import, which the rest of the suite must
    not inherit."""
    frozen = torch.backends.flags_frozen()
    script_calls = torch._C.ScriptFunction.__call__, torch._C.ScriptMethod.__call__
    try:
        op_db = importlib.import_module("torch.testing._internal.common_methods_invocations").op_db
        module_db = importlib.import_module("torch.testing._internal.common_modules").module_db
        noncontiguous_like = importlib.import_module("torch.testing._internal.common_utils").noncontiguous_like
    finally:
        # torch.backends is a module wrapper: set the flag where flags_frozen() reads it.
        torch.backends.flags_frozen.__globals__["__allow_nonbracketed_mutation_flag"] = not frozen
        torch._C.ScriptFunction.__call__, torch._C.ScriptMethod.__call__ = script_calls
    return op_db, module_db, noncontiguous_like


def noncontiguous_like(t: torch.Tensor) -> torch.Tensor:
    """Upstream's: the values interleaved with NaNs that must never be read."""
    return _upstream()[2](t)


def opinfo(name: str):
    matches = [op for op in _upstream()[0] if op.name == name and not op.variant_test_name]
    if len(matches) != 1:
        pytest.fail(f"op_db has {len(matches)} OpInfos named {name!r}")
    return matches[0]


def moduleinfo(name: str):
    matches = [m for m in _upstream()[1] if m.name == name]
    if len(matches) != 1:
        pytest.fail(f"module_db has {len(matches)} ModuleInfos named {name!r}")
    return matches[0]


def stable_seed(*parts: object) -> int:
    return zlib.crc32("/".join(map(str, parts)).encode()) % 2**31


# ---------------------------------------------------------------- prepared samples


@dataclass
class Problem:
    """The cuDNN convolution a sample sends, as engine_configs takes it."""

    input: torch.Tensor
    weight: torch.Tensor
    kwargs: dict
    features: frozenset[str]

    @property
    def sent_to_cudnn(self) -> bool:
        """Whether stock PyTorch sends this convolution to cuDNN at all (ATen's backend choice)."""
        kw = self.kwargs
        transposed = kw.get("transposed", False)
        backend = torch._C._select_conv_backend(
            self.input, self.weight, None, kw["stride"], kw["padding"], kw["dilation"], transposed,
            kw.get("output_padding", [0] * (self.weight.dim() - 2)), kw["groups"])
        return backend == (torch._C._ConvBackend.CudnnTranspose if transposed else torch._C._ConvBackend.Cudnn)

    @property
    def key(self) -> tuple:
        params = tuple(sorted((k, str(v)) for k, v in self.kwargs.items()))
        return (tuple(self.input.shape), self.input.stride(), tuple(self.weight.shape), self.weight.stride(),
                self.input.dtype, params)


@dataclass
class Prepared:
    """One sample: its CUDA operands, stock's results and the float64 reference."""

    desc: str
    variant: str
    forward: Callable[[], torch.Tensor]
    leaves: list[torch.Tensor]
    labels: list[str]
    problem: Problem | None
    grad_out: torch.Tensor | None = None  # random, in stock output's layout (non-contiguous variant: NaN-strided)
    stock: tuple | None = None  # (output, grads)
    reference: tuple | None = None  # (output, grads), float64 / complex128 on the CPU
    stock_error: str | None = None  # why stock could not run it
    stock_errors: dict[str, float] = field(default_factory=dict)  # label -> error vs reference


def cudnn_flags(case: DtypeCase):
    return torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=case.allow_tf32)


def evaluate(forward, leaves, grad_out) -> tuple[torch.Tensor, tuple]:
    out = forward()
    grads = torch.autograd.grad(out, leaves, grad_out, allow_unused=True)
    return out.detach(), tuple(None if g is None else g.detach() for g in grads)


def reference_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.complex128 if dtype.is_complex else torch.float64


def to_reference(t):
    if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()):
        return t.detach().to("cpu", reference_dtype(t.dtype)).requires_grad_(t.requires_grad)
    return t


def make_grad_out(out: torch.Tensor, seed: int, noncontiguous: bool) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    values = torch.randn(out.shape, generator=gen, dtype=reference_dtype(out.dtype))
    grad = torch.empty_like(out).copy_(values)  # stock output's layout, as autograd would give
    return noncontiguous_like(grad) if noncontiguous else grad


def expand(value, n: int) -> list[int]:
    if isinstance(value, int):
        return [value] * n
    values = [int(v) for v in value]
    return values * n if len(values) == 1 else values


def cudnn_problem(x, w, *, transposed: bool, stride=1, padding=0, dilation=1, groups=1, output_padding=0,
                  **_ignored) -> Problem:
    """The problem PyTorch hands cuDNN: batched, with padding="same"/"valid" resolved
    as ATen does (an odd total padding pads the input by one on the right)."""
    n = w.dim() - 2
    x, w = x.detach(), w.detach()
    features = set()
    if x.dim() == n + 1:
        x = x.unsqueeze(0)
        features.add("unbatched")
    stride, dilation = expand(stride, n), expand(dilation, n)
    if isinstance(padding, str):
        features.add(f"padding={padding}")
        if padding == "valid":
            padding = [0] * n
        else:
            total = [d * (k - 1) for d, k in zip(dilation, w.shape[2:])]
            padding = [t // 2 for t in total]
            pad = []
            for t, p in reversed(list(zip(total, padding))):
                pad += [0, t - 2 * p]
            if any(pad):
                x = F.pad(x, pad)
    else:
        padding = expand(padding, n)
    output_padding = expand(output_padding, n)
    features |= {name for name, v in (("stride", stride), ("dilation", dilation), ("output_padding", output_padding))
                 if any(e != (0 if name == "output_padding" else 1) for e in v)}
    if groups != 1:
        features.add("groups")
    kwargs = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    if transposed:
        kwargs.update(transposed=True, output_padding=output_padding)
    return Problem(x, w, kwargs, frozenset(features))


def describe(t) -> str:
    if not isinstance(t, torch.Tensor):
        return repr(t)
    layout = "" if t.is_contiguous() else f" strides {t.stride()}"
    return f"{list(t.shape)}{layout}"


def finish(item: Prepared, case: DtypeCase, seed: int, reference: tuple | None,
           make_reference: Callable[[], tuple[Callable, list]]) -> tuple | None:
    """Runs stock (every flag None) and, unless given, the float64 reference; returns it."""
    try:
        with cudnn_flags(case), torch_cudnn_algo.flags(conv_fwd_algo=None, conv_bwd_data_algo=None,
                                                       conv_bwd_filter_algo=None, conv_algo_strict=False):
            out = item.forward()
            item.grad_out = make_grad_out(out.detach(), seed, item.variant == "noncontiguous")
            grads = torch.autograd.grad(out, item.leaves, item.grad_out, allow_unused=True)
            item.stock = out.detach(), tuple(None if g is None else g.detach() for g in grads)
    except Exception as exc:  # noqa: BLE001 - reported per sample
        item.stock_error = f"{type(exc).__name__}: {first_reason(exc)}"
        return reference
    if reference is None:
        ref_forward, ref_leaves = make_reference()
        reference = evaluate(ref_forward, ref_leaves, to_reference(item.grad_out))
    item.reference = reference
    for label, stock, ref in zip(["output", *item.labels], [item.stock[0], *item.stock[1]],
                                 [reference[0], *reference[1]]):
        if stock is not None and ref is not None:
            item.stock_errors[label] = relative_error(stock, ref)
    return reference


def op_variant(sample, variant: str):
    if variant == "plain":
        return sample
    if variant == "noncontiguous":
        return sample.noncontiguous()
    formats = {4: torch.channels_last, 5: torch.channels_last_3d}
    changed = False

    def channels_last(t):
        nonlocal changed
        if isinstance(t, torch.Tensor) and t.dim() in formats:
            changed = True
            return t.detach().contiguous(memory_format=formats[t.dim()]).requires_grad_(t.requires_grad)
        return t

    converted = sample.transform(channels_last)
    return converted if changed else None


def op_conv_kwargs(op_name: str, sample) -> dict:
    transposed = "transpose" in op_name
    names = (["bias", "stride", "padding", "output_padding", "groups", "dilation"] if transposed
             else ["bias", "stride", "padding", "dilation", "groups"])
    kwargs = dict(zip(names, sample.args[1:]))
    kwargs.update(sample.kwargs)
    return kwargs


def tensor_leaves(sample) -> tuple[list[torch.Tensor], list[str]]:
    named = [("input", sample.input)]
    named += [({0: "weight", 1: "bias"}.get(i, f"arg{i}"), a) for i, a in enumerate(sample.args)]
    named += list(sample.kwargs.items())
    pairs = [(name, t) for name, t in named if isinstance(t, torch.Tensor) and t.requires_grad]
    return [t for _, t in pairs], [name for name, _ in pairs]


_PREPARED: dict[tuple, list[Prepared]] = {}


def prepared_op_samples(op_name: str, case: DtypeCase, device: str = "cuda") -> list[Prepared]:
    key = ("op", op_name, case.name, device)
    if key in _PREPARED:
        return _PREPARED[key]
    op = opinfo(op_name)
    if case.dtype not in op.supported_dtypes(device):
        pytest.fail(f"{op_name}'s OpInfo does not support {case.dtype} on {device}; OP_SETTINGS lists it")
    seed = stable_seed(op_name, case.name)
    torch.manual_seed(seed)
    transposed = "transpose" in op_name
    prepared: list[Prepared] = []
    for index, sample in enumerate(op.sample_inputs(device, case.dtype, requires_grad=True)):

        def make_reference(sample=sample):
            ref = sample.transform(to_reference)
            return functools.partial(op, ref.input, *ref.args, **ref.kwargs), tensor_leaves(ref)[0]

        reference = None
        for variant in OP_VARIANTS.get(case.name, ("plain",)):
            vs = op_variant(sample, variant)
            if vs is None:
                continue
            leaves, labels = tensor_leaves(vs)
            conv_kwargs = op_conv_kwargs(op_name, vs)
            params = {k: v for k, v in vs.kwargs.items() if k != "bias"}
            item = Prepared(
                desc=(f"{variant} sample {index}: input {describe(vs.input)}, weight {describe(vs.args[0])}, "
                      f"bias {describe(conv_kwargs.get('bias'))}, {params}"),
                variant=variant,
                forward=functools.partial(op, vs.input, *vs.args, **vs.kwargs),
                leaves=leaves,
                labels=labels,
                problem=(cudnn_problem(vs.input, vs.args[0], transposed=transposed, **conv_kwargs)
                         if variant == "plain" else None),
            )
            reference = finish(item, case, seed + index, reference, make_reference)
            prepared.append(item)
    _PREPARED[key] = prepared
    return prepared


def prepared_module_samples(name: str, case: DtypeCase, device: str = "cuda") -> list[Prepared]:
    key = ("module", name, case.name, device)
    if key in _PREPARED:
        return _PREPARED[key]
    info = moduleinfo(name)
    if case.dtype not in info.dtypes:
        pytest.fail(f"{name}'s ModuleInfo does not declare {case.dtype}; MODULES lists it")
    seed = stable_seed(name, case.name)
    torch.manual_seed(seed)
    inputs = info.module_inputs_func(info, device=device, dtype=case.dtype, requires_grad=True, training=True)
    formats = {4: torch.channels_last, 5: torch.channels_last_3d}
    transposed = "Transpose" in name
    prepared: list[Prepared] = []
    for index, module_input in enumerate(inputs):
        args, kwargs = module_input.constructor_input.args, module_input.constructor_input.kwargs
        (x0,) = module_input.forward_input.args
        torch.manual_seed(seed + index)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Complex modules are a new feature")
            base = info.module_cls(*args, **kwargs).to(device).to(case.dtype)  # as upstream's test_modules
        base.train(True)

        def make_reference(base=base, x0=x0):
            m_ref = copy.deepcopy(base).to("cpu").to(reference_dtype(case.dtype))
            x_ref = to_reference(x0)
            return functools.partial(m_ref, x_ref), [x_ref, *m_ref.parameters()]

        reference = None
        for variant in MODULE_VARIANTS.get(case.name, ("plain",)):
            m, x = base, x0
            if variant == "noncontiguous":
                x = noncontiguous_like(x0.detach()).requires_grad_()
            elif variant == "channels_last":
                fmt = formats.get(base.weight.dim())
                if fmt is None:
                    continue
                m = copy.deepcopy(base).to(memory_format=fmt)
                if x0.dim() == base.weight.dim():
                    x = x0.detach().contiguous(memory_format=fmt).requires_grad_()
            params = dict(m.named_parameters())
            problem = None
            if variant == "plain" and m.padding_mode == "zeros":
                problem = cudnn_problem(x, m.weight, transposed=transposed, stride=m.stride, padding=m.padding,
                                        dilation=m.dilation, groups=m.groups, output_padding=m.output_padding)
            item = Prepared(
                desc=(f"{variant} input {index} ({module_input.desc or 'batched'}): "
                      f"{info.module_cls.__name__}{args}{kwargs or ''} on input {describe(x)}"),
                variant=variant,
                forward=functools.partial(m, x),
                leaves=[x, *params.values()],
                labels=["input", *params],
                problem=problem,
            )
            reference = finish(item, case, seed + index, reference, make_reference)
            prepared.append(item)
    _PREPARED[key] = prepared
    return prepared


# ----------------------------------------------------------------------- comparison


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """Relative Frobenius error, in float64 (complex128) on the CPU; inf if not finite."""
    dtype = reference_dtype(actual.dtype)
    actual, expected = actual.detach().to("cpu", dtype), expected.detach().to("cpu", dtype)
    if not torch.isfinite(actual).all():
        return float("inf")
    diff = float((actual - expected).norm())
    scale = float(expected.norm())
    return diff / scale if scale > 0 else diff


def layout_problem(label: str, ours, stock) -> str | None:
    if ours is None or stock is None:
        if ours is None and stock is None:
            return None
        return f"{label}: {'no gradient' if ours is None else 'a gradient'}, stock {'none' if stock is None else 'one'}"
    if ours.dtype != stock.dtype:
        return f"{label}: dtype {ours.dtype}, stock {stock.dtype}"
    if ours.shape != stock.shape:
        return f"{label}: shape {list(ours.shape)}, stock {list(stock.shape)}"
    if ours.stride() != stock.stride():
        trivial = all(size <= 1 for size, a, b in zip(ours.shape, ours.stride(), stock.stride()) if a != b)
        return (f"{label}: strides {ours.stride()}, stock {stock.stride()}"
                f"{' (only in dims of size <= 1)' if trivial else ''}")
    return None


def notes_floor(case: DtypeCase, notes: tuple[str, ...]) -> float:
    """As test_engines_gpu: the error an engine's numerical notes allow."""
    floor = case.tolerance
    if "TENSOR_CORE" in notes and case.dtype in (torch.float32, torch.complex64):
        floor = max(floor, 5e-3)  # TF32: 10-bit mantissa products
    if {"FFT", "WINOGRAD", "WINOGRAD_TILE_4x4", "WINOGRAD_TILE_6x6", "WINOGRAD_TILE_13x13"} & set(notes):
        floor = max(floor, TRANSFORM_TOLERANCE)
    if "REDUCED_PRECISION_REDUCTION" in notes:
        floor = max(floor, 2e-2)
    return floor


def setting_floor(case: DtypeCase, setting: Setting, notes: tuple[str, ...] = ()) -> float:
    if isinstance(setting.value, int):
        if setting.value in TRANSFORM_ALGOS[setting.direction]:
            return max(case.tolerance, TRANSFORM_TOLERANCE)  # FFT/Winograd, float64 included
        return case.tolerance
    if setting.value == "fastest":
        # The policy keeps candidates within its max relative error tolerance.
        name = {torch.complex64: "float32"}.get(case.dtype, str(case.dtype).removeprefix("torch."))
        return max(case.tolerance, 2 * torch_cudnn_algo.tolerance_for(name, case.allow_tf32))
    return notes_floor(case, notes)


def compare(item: Prepared, out: torch.Tensor, grads: tuple, floor: float) -> list[str]:
    problems = []
    stock_out, stock_grads = item.stock
    ref_out, ref_grads = item.reference
    for label, ours, stock, ref in zip(["output", *item.labels], [out, *grads], [stock_out, *stock_grads],
                                       [ref_out, *ref_grads]):
        layout = layout_problem(label, ours, stock)
        if layout:
            problems.append(layout)
            continue
        if ours is None:
            continue
        error = relative_error(ours, ref)
        stock_error = item.stock_errors[label]
        allowed = max(ERROR_FACTOR * min(stock_error, STOCK_SANITY), floor)
        if not error <= allowed:
            problems.append(f"{label}: error {error:.2e} vs float64 > {allowed:.2e} "
                            f"(stock {stock_error:.2e}, floor {floor:.1e})")
    return problems


# ------------------------------------------------------------------------ the check


def select_configurations(items: list[Prepared], count: int) -> list[Prepared]:
    """Plain samples of up to `count` distinct cuDNN configurations that PyTorch sends to
    cuDNN, greedily covering the most features (string padding, unbatched, groups, ...),
    each with its twins (an unbatched sample and its batch-1 form are one configuration)."""
    groups: dict[tuple, list[Prepared]] = {}
    for item in items:
        if item.problem is not None and item.problem.sent_to_cudnn:
            groups.setdefault(item.problem.key, []).append(item)
    features = {k: frozenset().union(*(i.problem.features for i in g)) for k, g in groups.items()}
    order = list(groups)
    chosen: list[tuple] = []
    covered: set[str] = set()
    while order and len(chosen) < count:
        best = max(order, key=lambda k: (len(features[k] - covered), len(features[k]), -order.index(k)))
        chosen.append(best)
        covered |= features[best]
        order.remove(best)
    return [item for key in chosen for item in groups[key]]


@dataclass
class Outcome:
    ran: int = 0
    failures: list[str] = field(default_factory=list)
    unsupported: Counter = field(default_factory=Counter)  # reason -> samples
    not_sent: int = 0
    first_configs: dict[tuple, tuple] = field(default_factory=dict)  # problem key -> (name, notes) or (None, why)

    def summary(self) -> str:
        parts = [f"{self.ran} samples ran pinned"]
        if self.unsupported:
            reasons = "; ".join(f"{n}x {r}" for r, n in self.unsupported.most_common(3))
            more = len(self.unsupported) - 3
            more = f"; {more} more reasons" if more > 0 else ""
            parts.append(f"{sum(self.unsupported.values())} cannot run ({reasons}{more})")
        if self.not_sent:
            parts.append(f"{self.not_sent} ran none of ours in this direction (PyTorch does not send them to "
                         "cuDNN there, or the policy kept stock)")
        return ", ".join(parts)


def first_reason(exc: BaseException) -> str:
    line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return line.removeprefix("torch_cudnn_algo: ")


def flag_value(item: Prepared, case: DtypeCase, setting: Setting, outcome: Outcome):
    """(value to pin, numerical notes) or (None, why not)."""
    if setting.value != FIRST:
        return setting.value, ()
    problem = item.problem
    if problem.key not in outcome.first_configs:
        configs = torch_cudnn_algo.diagnostics.engine_configs(setting.direction, problem.input, problem.weight,
                                                              **problem.kwargs, allow_tf32=case.allow_tf32,
                                                              deterministic=False)
        usable = [c for c in configs if c.refusal is None and c.workspace is not None]
        outcome.first_configs[problem.key] = (
            (usable[0].name, usable[0].numerical_notes) if usable
            else (None, f"none of the {len(configs)} engine configurations listed is usable"))
    return outcome.first_configs[problem.key]


def run_sample(item: Prepared, case: DtypeCase, setting: Setting, outcome: Outcome) -> None:
    """Runs one sample with the setting's choice pinned (strict mode is on) and records the outcome."""
    direction = setting.direction
    if item.stock_error is not None:
        outcome.failures.append(f"{item.desc}: stock PyTorch fails it ({item.stock_error})")
        return
    try:
        value, notes = flag_value(item, case, setting, outcome)
    except RuntimeError as exc:
        outcome.failures.append(f"{item.desc}: engine_configs raised {type(exc).__name__}: {first_reason(exc)}")
        return
    if value is None:
        outcome.unsupported[notes] += 1
        return
    # The setting's flag is already set around the loop, except per-sample engine names.
    pin = torch_cudnn_algo.flags(**{FLAG[direction]: value}) if setting.value == FIRST else contextlib.nullcontext()
    try:
        before = torch_cudnn_algo.diagnostics.pinned_run_counts()[direction]
        with pin:
            out, grads = evaluate(item.forward, item.leaves, item.grad_out)
        if out.is_cuda:
            torch.cuda.synchronize()
        ran = torch_cudnn_algo.diagnostics.pinned_run_counts()[direction] - before
    except RuntimeError as exc:
        if UNSUPPORTED in str(exc):
            outcome.unsupported[first_reason(exc).split(UNSUPPORTED)[-1].lstrip(": ")] += 1
        else:
            outcome.failures.append(f"{item.desc}: {type(exc).__name__}: {first_reason(exc)}")
        return
    if ran == 0:
        outcome.not_sent += 1
        return
    outcome.ran += 1
    problems = compare(item, out, grads, setting_floor(case, setting, notes))
    if problems:
        pinned = f" [{value}]" if setting.value == FIRST else ""
        outcome.failures.append(f"{item.desc}{pinned}: " + "; ".join(problems))


def check_setting(items: list[Prepared], case: DtypeCase, setting: Setting, record_property, subject: str) -> None:
    if setting.subset is not None:
        items = select_configurations(items, setting.subset)
    outcome = Outcome()
    direction = setting.direction
    # Set once for the whole loop (setting a flag (de)registers the ATen overrides).
    pinned = {} if setting.value == FIRST else {FLAG[direction]: setting.value}
    with cudnn_flags(case), torch_cudnn_algo.flags(**pinned, conv_algo_strict=True):
        for item in items:
            run_sample(item, case, setting, outcome)
    record_property("samples", outcome.summary())
    where = f"{subject} {case.name} {FLAG[direction]}={setting.value!r}"
    if outcome.failures:
        shown = "\n  ".join(outcome.failures[:20])
        more = f"\n  ... and {len(outcome.failures) - 20} more" if len(outcome.failures) > 20 else ""
        pytest.fail(f"{where}: {len(outcome.failures)} samples failed ({outcome.summary()}):\n  {shown}{more}",
                    pytrace=False)
    if outcome.ran == 0 and (setting.general or not outcome.unsupported):
        pytest.fail(f"{where}: no sample ran our plan in {direction}: {outcome.summary()}", pytrace=False)
    # Otherwise none ran only where a specialised algorithm was refused, by the strict rule, on every sample.


def check_stock(items: list[Prepared], subject: str, case: DtypeCase) -> None:
    """The harness itself: stock PyTorch must agree with the float64 reference."""
    bad = [f"{i.desc}: stock fails it ({i.stock_error})" for i in items if i.stock_error]
    bad += [f"{i.desc}: {label} error {e:.2e}" for i in items for label, e in i.stock_errors.items()
            if not e <= STOCK_SANITY]
    assert items, f"{subject} {case.name}: no samples"
    assert not bad, f"{subject} {case.name}: stock disagrees with the float64 reference:\n  " + "\n  ".join(bad)


# ---------------------------------------------------------------------------- tests


@pytest.mark.parametrize("op_name, case", [pytest.param(op, CASES[d], id=f"{op}-{d}") for op in OPS
                                           for d in OP_SETTINGS])
def test_opinfo_stock_matches_float64_reference(op_name, case):
    check_stock(prepared_op_samples(op_name, case), op_name, case)


@pytest.mark.parametrize("op_name, case, setting", op_params())
def test_opinfo_samples(op_name, case, setting, record_property):
    check_setting(prepared_op_samples(op_name, case), case, setting, record_property, op_name)


@pytest.mark.parametrize("name, case", [pytest.param(n, CASES[d], id=f"{n}-{d}") for n, dtypes in MODULES.items()
                                        for d in dtypes])
def test_moduleinfo_stock_matches_float64_reference(name, case):
    check_stock(prepared_module_samples(name, case), name, case)


@pytest.mark.parametrize("name, case, setting", module_params())
def test_moduleinfo_inputs(name, case, setting, record_property):
    check_setting(prepared_module_samples(name, case), case, setting, record_property, name)
