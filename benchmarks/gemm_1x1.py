"""Experiment: the zoo's 1x1 convolutions (groups 1, stride 1, no padding, fp16 channels_last)
as cuBLAS GEMMs on the NHWC view, against cuDNN's best (benchmark=True), per direction.
GPU time by CUDA-graph replay of 20 calls, median of 5 replays."""
import sys, json, statistics
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import torch
from harness.networks import build_trainer
from harness.conv_time import record_conv_calls

torch.backends.cudnn.benchmark = True

def graph_ms(fn, calls=20, replays=7):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3): fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls): fn()
    times = []
    for _ in range(replays):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); b.record(); b.synchronize()
        times.append(a.elapsed_time(b) / calls)
    return statistics.median(times)

def rel(a, ref):
    return float((a.double() - ref).abs().max() / ref.abs().max())

rows = []
for net in sys.argv[1:]:
    trainer, _ = build_trainer(net, "cuda")
    calls = record_conv_calls(trainer.step)
    seen = set()
    for c in calls:
        if c.op != "forward" or len(c.w) != 4 or c.w[2:] != (1, 1) or c.transposed or c.dtype != "float16": continue
        n, ci, h, w = c.x; k = c.w[0]
        if c.w[1] != ci or tuple(c.y[2:]) != (h, w): continue
        key = (c.x, c.w)
        if key in seen: continue
        seen.add(key)
        x = torch.randn(c.x, device="cuda", dtype=torch.half).contiguous(memory_format=torch.channels_last)
        wt = (torch.randn(c.w, device="cuda", dtype=torch.half) / ci ** 0.5).contiguous(memory_format=torch.channels_last)
        dy = torch.randn(c.y, device="cuda", dtype=torch.half).contiguous(memory_format=torch.channels_last)
        xm = x.permute(0, 2, 3, 1).reshape(-1, ci)
        dym = dy.permute(0, 2, 3, 1).reshape(-1, k)
        wm = wt.view(k, ci)
        out_y = torch.empty_like(dy); out_dx = torch.empty_like(x); out_dw = torch.empty_like(wt)
        oy = out_y.permute(0, 2, 3, 1).view(-1, k); odx = out_dx.permute(0, 2, 3, 1).view(-1, ci); odw = out_dw.view(k, ci)
        conv_f = lambda: torch.ops.aten.convolution(x, wt, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
        conv_d = lambda: torch.ops.aten.convolution_backward(dy, x, wt, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1, [True, False, False])
        conv_w = lambda: torch.ops.aten.convolution_backward(dy, x, wt, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1, [False, True, False])
        mm_f = lambda: torch.mm(xm, wm.t(), out=oy)
        mm_d = lambda: torch.mm(dym, wm, out=odx)
        mm_w = lambda: torch.mm(dym.t(), xm, out=odw)
        r = {"net": net, "x": list(c.x), "w": list(c.w)}
        bytes_ = {"fwd": (x.numel() + dy.numel()) * 2, "bwd_data": (x.numel() + dy.numel()) * 2, "bwd_filter": (x.numel() + dy.numel()) * 2}
        for d, cf, mf in (("fwd", conv_f, mm_f), ("bwd_data", conv_d, mm_d), ("bwd_filter", conv_w, mm_w)):
            cms = graph_ms(cf); mms = graph_ms(mf)
            r[d] = {"cudnn_ms": cms, "mm_ms": mms, "bound_ms": bytes_[d] / 4.8e12 * 1e3}
        # accuracy of mm against float64
        ref_y = torch.ops.aten.convolution(x.double(), wt.double(), None, [1,1],[0,0],[1,1],False,[0,0],1)
        mm_f(); r["fwd"]["mm_err"] = rel(out_y, ref_y)
        ref_dw = torch.ops.aten.convolution_backward(dy.double(), x.double(), wt.double(), None, [1,1],[0,0],[1,1],False,[0,0],1,[False,True,False])[1]
        mm_w(); r["bwd_filter"]["mm_err"] = rel(out_dw, ref_dw)
        rows.append(r)
        print(net, c.x, c.w, " ".join(f"{d}: cudnn {r[d]['cudnn_ms']:.4f} mm {r[d]['mm_ms']:.4f} ({r[d]['cudnn_ms']/r[d]['mm_ms']:.2f}x) bound {r[d]['bound_ms']:.4f}" for d in ("fwd","bwd_data","bwd_filter")), f"err f {r['fwd']['mm_err']:.1e} w {r['bwd_filter']['mm_err']:.1e}", flush=True)
    del trainer
    torch.cuda.empty_cache()
out = Path(sys.argv[0]).parent
import os
Path(os.environ.get("OUT", "/tmp")).joinpath("mm1x1.json").write_text(json.dumps(rows))
tot = {d: [sum(r[d]["cudnn_ms"] for r in rows), sum(r[d]["mm_ms"] for r in rows)] for d in ("fwd","bwd_data","bwd_filter")}
print("sum per distinct layer (cudnn, mm):", tot)
