"""The allocator's trace as a timeline (probe_timeline), and PyTorch memory snapshots converted
to it."""
import ast
import functools
import os
import sys
import time

from .build import describe_parameters
from .optimizers import state_tensors
from .protocol import BadRequest, SCHEMA_VERSION, write_atomically
from .vocabulary import CATEGORIES


class _Holder:
    __slots__ = ("t", "k", "a", "__weakref__")

    def __init__(self, t, k, a):
        self.t, self.k, self.a = t, k, a

    def __del__(self):
        try:
            self.a.release(self.k)
        except Exception:
            pass


class Recorder:
    """torch.cuda.memory._record_memory_history for --timeline and --snapshot: every block the
    caching allocator hands out or takes back, replayed into a timeline of the run and the
    live blocks at the last step's peak."""

    def __init__(self, torch):
        self.t = torch
        self.on = False
        self.marks = []  # (label dict, time_us, allocated at that moment)

    def start(self):
        try:
            self.t.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python",
                                                      max_entries=4_000_000)
            self.on = True
        except Exception as e:  # older PyTorch
            print(f"headroom_engine: no allocator trace ({e})", file=sys.stderr)

    def mark(self, label, allocated):
        if self.on:
            self.marks.append((label, time.time_ns() // 1000, allocated))

    def stop(self):
        if not self.on:
            return None
        snap = self.t.cuda.memory._snapshot()
        self.t.cuda.memory._record_memory_history(enabled=None)
        self.on = False
        traces = snap.get("device_traces") or [[]]
        dev = self.t.cuda.current_device()
        return traces[dev] if dev < len(traces) else traces[0]


_FRAME_KEEP = ("transformers/", "peft/", "torch/optim", "torch/nn/functional", "torch/nn/modules",
               "torch/utils/checkpoint", "torch/distributed", "bitsandbytes/", "headroom_engine", "hrengine/", "trl/", "tinylm")


_MAX_SOURCE = 4 << 20  # a source file read for its functions' names: bounded


@functools.lru_cache(maxsize=256)
def _functions(filename):
    """(first line, last line, qualified name) of every function defined in a Python file."""
    try:
        if os.path.getsize(filename) > _MAX_SOURCE:
            return ()
        with open(filename, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError, RecursionError):
        return ()
    out = []

    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                q = f"{prefix}.{child.name}" if prefix else child.name
                if not isinstance(child, ast.ClassDef):
                    out.append((child.lineno, child.end_lineno or child.lineno, q))
                walk(child, q)
            else:
                walk(child, prefix)

    walk(tree, "")
    return tuple(out)


@functools.lru_cache(maxsize=65536)  # per distinct frame: a run has tens, its events many thousands
def qualified_name(filename, line, name):
    """"LlamaRMSNorm.forward" for a frame's "forward": the innermost function of that name whose
    lines hold the frame's line (the allocator's frames carry no class), so a recorded run's
    allocations name their module (the per-layer view's kind of op: Note [Layer and op labels])."""
    best = None
    for first, last, q in _functions(filename):
        if first <= line <= last and q.rsplit(".", 1)[-1] == name and (best is None or first >= best[0]):
            best = (first, q)
    return best[1].replace(".<locals>", "") if best else name


def frame_of(frames):
    for f in frames or []:
        fn = f.get("filename", "")
        if any(k in fn for k in _FRAME_KEEP) and "_tensor.py" not in fn:
            tail = "/".join(fn.split("/")[-2:])
            line, name = f.get("line", 0), f.get("name", "")
            return f"{tail}:{line} {qualified_name(fn, line, name)}"
    return "backward (autograd)" if not frames else "other"


def build_timeline(trace, marks, persistent, grad_ptrs, logits_unit):
    """Allocations and frees in order, each block with a category, and the phase marks aligned
    to event indices. A mark's index is the last event at or before its time whose running
    total equals the allocated bytes the allocator reported at the mark, so marks do not
    depend on the two clocks agreeing to the microsecond.

    Categories: blocks never freed at a parameter's or optimizer tensor's address are weights
    or optimizer state; blocks alive when the last optimizer step began at a gradient's address
    are gradients; vocabulary-sized blocks are logits; a block made in forward and freed in
    backward was saved for backward (activations); everything else is a temporary."""
    import bisect
    frames, frame_ids = [], {}
    events = []  # [kind, block id, size, frame, addr, stream]
    streams = {0: 0}  # CUDA stream handle -> 0 (the default stream), 1, 2... in order of first use
    blocks = {}  # addr -> (id, size)
    next_id = 0
    cum = 0
    cums, times = [], []
    for e in trace:
        a = e.get("action")
        size = int(e.get("size", 0))
        addr = int(e.get("addr", 0))
        if a == "alloc":
            fr = frame_of(e.get("frames"))
            if fr not in frame_ids:
                frame_ids[fr] = len(frames)
                frames.append(fr)
            blocks[addr] = (next_id, size)
            cum += size
            raw = e.get("stream", 0)
            st = streams.setdefault(raw if isinstance(raw, int) else 0, len(streams))
            events.append([0, next_id, size, frame_ids[fr], addr, st])
            next_id += 1
        elif a == "free_completed":
            blk = blocks.pop(addr, None)
            if blk is None:
                continue  # allocated before recording started
            cum -= blk[1]
            events.append([1, blk[0], blk[1], -1, addr, 0])
        elif a in ("segment_alloc", "segment_map"):
            events.append([2, -1, size, -1, addr, 0])
        elif a in ("segment_free", "segment_unmap"):
            events.append([3, -1, size, -1, addr, 0])
        else:
            continue
        cums.append(cum)
        times.append(int(e.get("time_us", 0)))
    have_times = any(times)
    aligned = []
    for label, t_us, allocated in marks:
        i = bisect.bisect_right(times, t_us) if have_times else len(cums)
        j = i
        while j > 0 and cums[j - 1] != allocated:
            j -= 1
        exact = j > 0 or allocated == 0
        aligned.append(dict(label, event=j if exact else i, allocated_bytes=allocated, exact=exact))
    aligned.sort(key=lambda m: m["event"])
    phase_at = []
    k, cur = 0, "after_load"
    for idx in range(len(events)):
        while k < len(aligned) and aligned[k]["event"] <= idx:
            cur = aligned[k]["phase"]
            k += 1
        phase_at.append(cur)
    last_opt = max((m["event"] for m in aligned if m["phase"] == "optimizer"), default=len(events))
    born, freed = {}, {}
    for idx, (kind, bid, size, _, addr, _) in enumerate(events):
        if kind == 0:
            born[bid] = (idx, addr)
        elif kind == 1:
            freed[bid] = idx
    cat = {}
    for bid, (b_idx, addr) in born.items():
        f_idx = freed.get(bid)
        size = events[b_idx][2]
        if f_idx is None and addr in persistent:
            c = persistent[addr]
        elif addr in grad_ptrs and b_idx < last_opt and (f_idx is None or f_idx >= last_opt):
            c = "gradients"
        elif logits_unit and size >= 2 * logits_unit and size % logits_unit == 0:
            c = "logits"
        elif f_idx is not None and phase_at[b_idx] == "forward" and phase_at[f_idx] == "backward":
            c = "activations"
        else:
            c = "temporaries"
        cat[bid] = CATEGORIES.index(c)
    out_events = []
    for kind, bid, size, fr, addr, st in events:
        if kind == 0:  # the stream only when it is not the default one (the allocator pools by stream)
            out_events.append([0, bid, size, cat[bid], fr, addr] + ([st] if st else []))
        elif kind == 1:
            out_events.append([1, bid, size])
        else:
            out_events.append([kind, size])
    return {"frames": frames, "events": out_events, "marks": aligned, "categories": list(CATEGORIES),
            "event_kinds": ["alloc", "free", "segment_alloc", "segment_free"]}


def snapshot_at_peak(trace, marks, step):
    """The live blocks at the moment of the step's highest allocated total (docs/probe-protocol.md)."""
    times = [int(e.get("time_us", 0)) for e in trace]
    start = min((m[1] for m in marks if m[0].get("step") == step), default=None)
    live, segs = {}, {}
    cum, best, best_state = 0, -1, None
    for i, e in enumerate(trace):
        a = e.get("action")
        addr, size = int(e.get("addr", 0)), int(e.get("size", 0))
        if a == "alloc":
            live[addr] = size
            cum += size
        elif a == "free_completed" and addr in live:
            cum -= live.pop(addr)
        elif a in ("segment_alloc", "segment_map"):
            segs[addr] = size
        elif a in ("segment_free", "segment_unmap"):
            segs.pop(addr, None)
        if start is not None and times[i] >= start and cum > best:
            best = cum
            best_state = (dict(live), dict(segs))
    if best_state is None:
        return None
    live, segs = best_state
    sizes = sorted(live.values(), reverse=True)
    seg_list = []
    for base, total in sorted(segs.items()):
        inside = [s for a, s in live.items() if base <= a < base + total]
        seg_list.append({"total_bytes": total, "allocated_bytes": sum(inside), "allocated_blocks": len(inside),
                         "pool": "small" if total <= (2 << 20) else "large"})
    return {"schema_version": SCHEMA_VERSION, "kind": "probe_snapshot", "device": "cuda",
            "taken_at": f"peak of step {step} (exact, from the allocator trace)",
            "allocated_bytes": best, "step_peak_allocated_bytes": best, "live_blocks": len(live),
            "largest_block_bytes": sizes[:64], "segments": seg_list[:4096]}


def _plain_unpickler(f):
    """torch.cuda.memory._dump_snapshot pickles plain dicts, lists, strings and numbers: refuse
    anything that would import a class (a pickle can run code; the file is the user's own, but a
    snapshot never needs it)."""
    import pickle

    class Plain(pickle.Unpickler):
        def find_class(self, module, name):
            raise BadRequest("snapshot", f"{module}.{name}", "a memory snapshot holds plain data only")
    return Plain(f)


def _phase_of(frame):
    if frame.startswith("backward"):
        return "backward"
    if frame.startswith("optim/") or "torch/optim" in frame:  # frame_of keeps the path's last two parts
        return "optimizer"
    return "forward"


def convert_snapshot(path, out_path, limit=2 << 30):
    """A memory snapshot from the user's own training (torch.cuda.memory._dump_snapshot, with
    _record_memory_history on) as a probe_timeline: the busiest device's trace, every allocation
    and free, phases read from the frames (autograd's are backward, torch/optim's the optimizer,
    the rest forward), steps cut where a forward follows an optimizer step; the last whole step
    is the one to draw."""
    size = os.path.getsize(path)
    if size > limit:
        raise BadRequest("snapshot", f"{size} bytes", f"is larger than the {limit}-byte limit")
    with open(path, "rb") as f:
        try:
            snap = _plain_unpickler(f).load()
        except BadRequest:
            raise
        except Exception as e:
            raise BadRequest("snapshot", os.path.basename(path), f"not a PyTorch memory snapshot ({type(e).__name__})")
    if not isinstance(snap, dict) or not isinstance(snap.get("device_traces"), list):
        raise BadRequest("snapshot.device_traces", "(missing)",
                         "no allocation trace: record it with torch.cuda.memory._record_memory_history() first")
    traces = [t for t in snap["device_traces"] if isinstance(t, list)]
    trace = max(traces, key=len) if traces else []
    if not any(isinstance(e, dict) and e.get("action") == "alloc" for e in trace):
        raise BadRequest("snapshot.device_traces", "0 allocations", "the trace is empty")
    tl = build_timeline(trace, [], {}, set(), 0)
    # Blocks allocated before recording began (the weights, usually) are not in the trace; what
    # the segments hold at the dump, less what the trace leaves alive, is that baseline.
    alive_at_end = {}
    for e in tl["events"]:
        if e[0] == 0:
            alive_at_end[e[1]] = e[2]
        elif e[0] == 1:
            alive_at_end.pop(e[1], None)
    active = 0
    for seg in snap.get("segments") or []:
        for b in (seg.get("blocks") or []) if isinstance(seg, dict) else []:
            if isinstance(b, dict) and b.get("state") == "active_allocated":
                active += int(b.get("size", 0))
    tl["startup_bytes"] = max(0, active - sum(alive_at_end.values()))
    frames = tl["frames"]
    marks, step, cur = [], 0, None
    for i, e in enumerate(tl["events"]):
        if e[0] != 0:
            continue
        ph = _phase_of(frames[e[4]])
        if ph == cur:
            continue
        if ph == "forward" and cur == "optimizer":
            step += 1
        if ph == "backward" and cur is None:
            marks.append({"step": step, "phase": "forward", "micro_batch": 0, "event": 0, "allocated_bytes": 0,
                          "exact": False})
        marks.append({"step": step, "phase": ph, "micro_batch": 0, "event": i, "allocated_bytes": 0, "exact": False})
        cur = ph
    whole = step - 1 if step >= 1 and cur != "optimizer" else step
    tl["marks"] = marks
    tl.update({"schema_version": SCHEMA_VERSION, "kind": "probe_timeline", "engine": "snapshot",
               "device": "cuda", "step": max(whole, 0), "source_file": os.path.basename(path)})
    write_atomically(out_path, tl, indent=None)
    return tl


def finish_trace(args, trace, marks, model, opt, grad_ptrs, R, last_step, cfg):
    if not trace:
        return
    persistent = {}
    for p in model.parameters():
        local = p.to_local() if hasattr(p, "to_local") else p
        if local.numel():
            persistent[local.data_ptr()] = "weights"
    for v in state_tensors(opt):
        persistent[v.data_ptr()] = "optimizer_state"
    tokens = cfg["micro_batch"] * cfg["seq_len"]
    vocab = int(R["hf_config"].get("vocab_size", 0) or 0)
    if args.timeline:
        tl = build_timeline(trace, marks, persistent, grad_ptrs, tokens * vocab)
        tl.update({"schema_version": SCHEMA_VERSION, "kind": "probe_timeline", "engine": "transformers",
                   "device": "cuda", "config": cfg, "model_id": R["model_id"], "step": last_step,
                   "model_layout": describe_parameters(model)})
        write_atomically(args.timeline, tl, indent=None)
    if args.snapshot:
        snap = snapshot_at_peak(trace, marks, last_step)
        if snap:
            write_atomically(args.snapshot, snap)
