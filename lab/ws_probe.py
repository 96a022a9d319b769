#!/usr/bin/env python3
"""What the caching allocator holds around the fused loss's ops on this GPU (one fresh process
per question): cuBLAS/cuBLASLt workspaces by layout and thread, and reduction buffers. Prints
one JSON line per question: bytes still allocated after the op (its outputs freed) and the
op's peak above the bytes before it."""
import json, os, subprocess, sys

QUESTIONS = ["mm_nt", "mm_nn_after_nt", "addmm_inplace_after_nt", "reductions", "mm_in_function_fwd",
             "mm_nt_then_backward_thread", "linear_then_cross_entropy"]


def ask(q):
    import torch
    dev = torch.device("cuda")
    n, h, V = 256, 2048, 128256
    x = torch.randn(n, h, device=dev, dtype=torch.bfloat16)
    w = torch.randn(V, h, device=dev, dtype=torch.bfloat16)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()

    def mark(tag, keep_bytes=0):
        torch.cuda.synchronize()
        return {"tag": tag, "held": torch.cuda.memory_allocated() - base - keep_bytes,
                "peak_above": torch.cuda.max_memory_allocated() - base}

    out = [{"preferred_blas": str(torch.backends.cuda.preferred_blas_library()),
            "CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG"), "torch": torch.__version__}]
    if q == "mm_nt":
        y = x @ w.t(); del y; out.append(mark("x@w.t()"))
    elif q == "mm_nn_after_nt":
        y = x @ w.t(); out.append(mark("x@w.t() (output kept)", y.numel() * 2))
        torch.mm(y, w); out.append(mark("mm(y, w) NN", y.numel() * 2))
    elif q == "addmm_inplace_after_nt":
        y = x @ w.t(); gw = torch.zeros_like(w)
        out.append(mark("x@w.t() + zeros_like(w)", y.numel() * 2 + gw.numel() * 2))
        gw.addmm_(y.t(), x); out.append(mark("gw.addmm_(y.t(), x)", y.numel() * 2 + gw.numel() * 2))
    elif q == "reductions":
        y = x @ w.t(); kept = y.numel() * 2
        out.append(mark("after mm", kept))
        m = y.max(1, True)[0]; out.append(mark("max(1)", kept + m.numel() * 2 + n * 8)); del m
        s = y.sum(1, True, dtype=torch.float); out.append(mark("sum(1, float)", kept + s.numel() * 4)); del s
        y.gather(1, torch.zeros(n, 1, dtype=torch.long, device=dev))
        out.append(mark("gather", kept))
    elif q == "mm_in_function_fwd":
        class F(torch.autograd.Function):
            @staticmethod
            def forward(ctx, a, b):
                r = a @ b.t()
                return r.sum()

            @staticmethod
            def backward(ctx, g):
                return None, None
        xr = x.clone().requires_grad_(); base2 = torch.cuda.memory_allocated()
        F.apply(xr, w); torch.cuda.synchronize()
        out.append({"tag": "mm inside Function.forward", "held": torch.cuda.memory_allocated() - base2,
                    "peak_above": torch.cuda.max_memory_allocated() - base})
    elif q == "mm_nt_then_backward_thread":
        wl = torch.nn.Parameter(torch.randn(1024, h, device=dev, dtype=torch.bfloat16))
        xr = x.clone().requires_grad_()
        y = (xr @ wl.t()).sum(); out.append(mark("forward mm", 0))
        y.backward(); del y; xr.grad = None; wl.grad = None
        out.append(mark("after backward (grads dropped)", wl.numel() * 2 + xr.numel() * 2))
    elif q == "linear_then_cross_entropy":
        labels = torch.randint(0, V, (n,), device=dev)
        y = torch.nn.functional.linear(x, w); out.append(mark("linear", y.numel() * 2))
        f = y.float(); loss = torch.nn.functional.cross_entropy(f, labels)
        out.append(mark("cross_entropy (fp32 logits kept)", y.numel() * 2 + f.numel() * 4 + 4))
        out.append({"tag": "loss", "value": float(loss)})
    print(json.dumps({"question": q, "rows": out}), flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        ask(sys.argv[1])
    else:
        for q in QUESTIONS:
            r = subprocess.run([sys.executable, __file__, q], capture_output=True, text=True, timeout=60)
            print(r.stdout.strip() or json.dumps({"question": q, "error": r.stderr[-400:]}), flush=True)
