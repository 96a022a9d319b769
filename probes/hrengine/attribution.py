"""One instrumented step that attributes the phases' peaks to categories (weights, gradients,
optimizer state, activations, logits, temporaries)."""
import sys
import threading

from .meters import is_oom
from .optimizers import state_tensors, storage_bytes, storage_key
from .protocol import Stopped, short
from .trace import _Holder
from .vocabulary import CATEGORIES, PHASES


class Attributor:
    """One instrumented step: samples at every saved tensor (pack and unpack hooks), every
    gradient accumulation and every decoder layer; at the sample with the most bytes allocated,
    bytes are put in categories by tensor identity: weights are the parameters, gradients their
    .grad, optimizer state the optimizer's tensors, activations the tensors autograd saved,
    logits the lm_head's output and vocabulary-sized saved tensors; temporaries are the rest.
    Running totals keep a sample O(1)."""

    def __init__(self, torch, model, opt, meter, vocab):
        self.t, self.model, self.opt, self.meter, self.vocab = torch, model, opt, meter, vocab
        self.params = set()
        for p in model.parameters():
            local = p.to_local() if hasattr(p, "to_local") else p
            if local.numel():
                self.params.add(storage_key(local))
        self.state = sum(storage_bytes(v) for v in state_tensors(opt))
        self.saved = {}  # storage -> [bytes, holders, is_logits]
        self.acts = 0
        self.logits_saved = 0
        self.live_logits = {}
        self.grad_seen = set()
        self.grads = self.scan_grads()
        self.best = None
        self.samples = []
        self.phase = "forward"  # set by attribute(): every sample also counts for its phase
        self.best_by_phase = {}
        self.lock = threading.Lock()

    def scan_grads(self):
        n = 0
        for p in self.model.parameters():
            g = p.grad
            if g is not None:
                g = g.to_local() if hasattr(g, "to_local") else g
                n += storage_bytes(g)
                self.grad_seen.add(id(p))
        return n

    def on_grad(self, p):
        if id(p) not in self.grad_seen and p.grad is not None:
            self.grad_seen.add(id(p))
            g = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
            self.grads += storage_bytes(g)
        self.sample()

    def rescan(self):
        self.grad_seen.clear()
        self.grads = self.scan_grads()
        self.sample()

    def sample(self):
        with self.lock:
            cats = {"gradients": self.grads, "activations": self.acts,
                    "logits": self.logits_saved + sum(self.live_logits.values())}
            if self.meter.cuda:
                now = self.meter.allocated_now()
                if self.best is None or now > self.best[0]:
                    self.best = (now, cats)
                b = self.best_by_phase.get(self.phase)
                if b is None or now > b[0]:
                    self.best_by_phase[self.phase] = (now, cats)
            else:
                self.samples.append((self.meter.mark(), cats, self.phase))

    def pack(self, t):
        try:
            k = storage_key(t)
        except Exception:
            return t
        with self.lock:
            if k in self.params:
                return t.detach()
            e = self.saved.get(k)
            if e is None:
                lg = t.dim() > 0 and t.shape[-1] == self.vocab
                e = self.saved[k] = [storage_bytes(t), 0, lg]
                if lg:
                    self.logits_saved += e[0]
                else:
                    self.acts += e[0]
            e[1] += 1
        holder = _Holder(t.detach(), k, self)
        self.sample()
        return holder

    def unpack(self, h):
        if isinstance(h, _Holder):
            self.sample()
            return h.t
        return h

    def release(self, k):
        with self.lock:
            e = self.saved.get(k)
            if e is not None:
                e[1] -= 1
                if e[1] <= 0:
                    del self.saved[k]
                    if e[2]:
                        self.logits_saved -= e[0]
                    else:
                        self.acts -= e[0]

    def on_logits(self, _mod, _inp, out):
        t = out[0] if isinstance(out, tuple) else out
        if not hasattr(t, "data_ptr"):
            return
        k = storage_key(t)
        self.live_logits[k] = storage_bytes(t)
        import weakref
        weakref.finalize(t, self.live_logits.pop, k, None)
        self.sample()

    def result(self, peak_allocated, weights_bytes, phase=None):
        """Bytes by category at the step's peak (phase None), or at a phase's peak: the sample
        with the most allocated in it; temporaries are the rest of `peak_allocated`."""
        if self.meter.cuda:
            best = self.best if phase is None else self.best_by_phase.get(phase)
            if best is None:
                return None
            cats = best[1]
        else:
            samples = [s for s in self.samples if phase is None or s[2] == phase]
            if not samples:
                return None
            self.meter.finish()
            cats = max(samples, key=lambda kc: self.meter.at(kc[0]))[1]
        a = {c: 0 for c in CATEGORIES}
        a["weights"] = weights_bytes
        a["optimizer_state"] = self.state
        a.update(cats)
        named = sum(a[c] for c in ("weights", "gradients", "optimizer_state", "activations", "logits"))
        a["temporaries"] = max(0, peak_allocated - named)
        return {k: int(v) for k, v in a.items()}


def attribute(torch, model, opt, meter, vocab, forward, backward, optimizer_step, ga, batches, sync_ctx, D):
    """The instrumented step. Returns an Attributor (resolved in finalize), or None if this
    stack refuses saved-tensor hooks (then the result has no attribution)."""
    A = Attributor(torch, model, opt, meter, vocab)
    handles = []
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None:
        handles.append(head.register_forward_hook(A.on_logits))
    for p in model.parameters():
        if p.requires_grad and hasattr(p, "register_post_accumulate_grad_hook"):
            handles.append(p.register_post_accumulate_grad_hook(A.on_grad))
    try:
        with torch.autograd.graph.saved_tensors_hooks(A.pack, A.unpack):
            for m in range(ga):
                with sync_ctx(m == ga - 1):
                    A.phase = "forward"
                    loss = forward(batches[m])
                    A.sample()
                    A.phase = "backward"
                    backward(loss)
                    del loss
                    A.rescan()
        # The optimizer phase: no hook fires inside step(); its sample after it sees the
        # gradients and the state, the step's own temporaries being the rest of its peak.
        A.phase = "optimizer"
        optimizer_step()
        A.sample()
        opt.zero_grad(set_to_none=True)
    except (Stopped, KeyboardInterrupt):
        raise
    except Exception as e:
        if D.enabled or is_oom(torch, e):
            raise
        print(f"headroom-engine: no attribution ({type(e).__name__}: {short(str(e), 200)})", file=sys.stderr)
        return None
    finally:
        for h in handles:
            h.remove()
    return A


def finalize(M, A, cuda, weights):
    """The steady-state peak (max over measured steps), the CUDA context, and the attribution."""
    steady = [p for p in M["phases"] if p["phase"] != "after_load" and p["step"] >= M["warmup_steps"]]
    if M["oom"] is None:
        best = max(steady, key=lambda p: p["peak_allocated_bytes"]) if steady else M["phases"][0]
        reserved = max([p["peak_reserved_bytes"] for p in steady] + [0])
        last = M["phases"][-1]
        base = (last.get("process_used_bytes") or last.get("device_used_bytes", 0)) if cuda else 0
        context = max(0, base - last.get("reserved_bytes", 0)) if cuda else 0
        M["peak"] = {"phase": best["phase"], "allocated_bytes": best["peak_allocated_bytes"],
                     "reserved_bytes": reserved, "cuda_context_bytes": context,
                     "device_total_bytes": reserved + context}
    else:
        o = M["oom"]
        seen = [p for p in M["phases"] if "peak_allocated_bytes" in p]
        reserved = max([p["peak_reserved_bytes"] for p in seen] + [M.get("oom_reserved", 0)])
        M.pop("oom_reserved", None)
        M["peak"] = {"phase": o["phase"], "allocated_bytes": max(o["in_use_bytes"], 0),
                     "reserved_bytes": max(reserved, o["in_use_bytes"]), "cuda_context_bytes": 0,
                     "device_total_bytes": max(reserved, o["in_use_bytes"])}
    attribution = A.result(M["peak"]["allocated_bytes"], weights) if (A is not None and M["oom"] is None) else None
    if attribution is None:
        attribution = {c: 0 for c in CATEGORIES}
        attribution["temporaries"] = M["peak"]["allocated_bytes"]
    M["attribution"] = attribution
    # The same by phase, at each steady phase's peak, for the per-phase view's measured bars.
    if A is not None and M["oom"] is None:
        by_phase = {}
        for ph in ("forward", "backward", "optimizer"):
            peaks = [p["peak_allocated_bytes"] for p in steady if p["phase"] == ph]
            a = A.result(max(peaks), weights, ph) if peaks else None
            if a is not None:
                by_phase[ph] = a
        if by_phase:
            M["phase_attribution"] = by_phase


def rank_peak(M, rank, psum):
    steady = {}
    for p in M["phases"]:
        if p["phase"] == "after_load" or p["step"] >= M["warmup_steps"]:
            cur = steady.get(p["phase"])
            if cur is None or p["peak_allocated_bytes"] > cur["peak_allocated_bytes"]:
                steady[p["phase"]] = p
    phases = [{"phase": ph, "step": steady[ph]["step"], "peak_allocated_bytes": steady[ph]["peak_allocated_bytes"],
               "peak_reserved_bytes": steady[ph]["peak_reserved_bytes"],
               "device_used_bytes": steady[ph].get("process_used_bytes") or steady[ph].get("device_used_bytes", 0)}
              for ph in PHASES if ph in steady]
    peak = M["peak"]
    r = {"rank": rank, "device_name": M["device_name"], "peak_phase": peak["phase"],
         "peak_allocated_bytes": peak["allocated_bytes"], "peak_reserved_bytes": peak["reserved_bytes"],
         "device_total_bytes": peak["device_total_bytes"], "parameters_sum": psum, "oom": M["oom"] is not None,
         "phases": phases}
    if M["oom"]:
        r["peak_phase"] = M["oom"]["phase"]
        r["peak_allocated_bytes"] = max(r["peak_allocated_bytes"], M["oom"]["in_use_bytes"])
    return r
