#!/usr/bin/env python3
"""SDPA's math path with a boolean mask on CUDA (Falcon's multi-query shape, scaled down), forward
and backward, with the allocator's history and C++ stacks: which ATen function makes each
scores-sized buffer. Run plain, and under a pass-through TorchDispatchMode (does a mode alone
change the path?). Prints one line per allocation/free of at least 1 MiB."""
import sys, torch
from torch.utils._python_dispatch import TorchDispatchMode

class PassThrough(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))

def step(mode):
    torch.manual_seed(0)
    q = torch.randn(1, 16, 2048, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(1, 1, 2048, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(1, 1, 2048, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    mask = torch.ones(2048, 2048, device="cuda", dtype=torch.bool).tril()[None, None]
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="all")
    if mode:
        with PassThrough():
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            o.float().sum().backward()
    else:
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        o.float().sum().backward()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    return snap

def show(snap, label):
    print("==", label)
    for tr in snap["device_traces"]:
        for e in tr:
            if e["action"] not in ("alloc", "free_requested") or e["size"] < (1 << 20):
                continue
            names = [f.get("name", "") for f in e.get("frames", [])]
            import re
            keep = []
            for n in names:
                m = re.search(r"(at::_ops::\w+::call|at::native::\w+|torch::autograd::generated::\w+|torch::autograd::CopySlices\w*|VariableType::\w+)", n)
                if m and m.group(1) not in keep:
                    keep.append(m.group(1))
            keep = keep[:8]
            print(f'{e["action"]:15s} {e["size"]:>12d} {e["addr"] % 100000:>6d}  ' + " | ".join(x[:90] for x in keep))

show(step(False), "plain")
show(step(True), "under a pass-through TorchDispatchMode")
