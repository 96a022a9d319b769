"""--trace: the training step of the user's own stack (Transformers, PEFT, torch.optim) run on
fake tensors, with nothing allocated and no GPU needed, recorded as the caching allocator would
see it: every storage made and freed, in order, with its size. Core replays the timeline
through its allocator model (core/replay) into peak allocated, reserved, per phase.

See Note [Traced step] (docs/estimator.md): what the trace sees (every ATen op's outputs, through
a dispatch mode above FakeTensorMode; a storage is freed when its last tensor dies), and the
rules by which it follows what CUDA does where fake tensors cannot tell (CUDA_RULES below).
"""
import os
import sys
import time
import weakref
from itertools import compress

from . import depth
from .build import build_model, describe_parameters, find_layers
from .optimizers import build_optimizer, state_tensors, untyped_storage
from . import ranks
from .parallel import _Null, gradient_sync_control, wrap_parallel
from .protocol import BadRequest, Missing, SCHEMA_VERSION, VERSION, check_stop, short, write_atomically
from .trace import build_timeline

# What a CUDA step allocates that no ATen op returns, each with the H200 measurement behind it
# (PyTorch 2.11; the same facts core/sim/ops.cpp states for the op-by-op simulation).
#  - cublas_workspace: cuBLAS takes its workspace from the caching allocator at the first
#    matmul on a handle and keeps it: one handle for the forward (the main thread), one for the
#    backward (the autograd engine's device thread). 32 MiB on sm90 (CUBLAS_WORKSPACE_CONFIG
#    :4096:8), measured in every corpus run.
#  - sdpa_choice: fake tensors have no device to ask, so aten::_fused_sdp_choice is answered as
#    PyTorch's sdp_utils answers it on an H200: flash for fp16/bf16 without a mask and head sizes
#    equal, multiple of 8 and at most 256; memory-efficient where a mask is given or flash cannot
#    run; math otherwise.
#  - flash_fwd_scratch / flash_bwd_workspace: the flash kernels' scratch (256 bytes in forward),
#    and in backward one workspace, freed before the op returns: fp32 dq accumulators (q's
#    elements), under grouped-query attention dk and dv at every query head in q's dtype, the
#    fp32 softmax sums and 256 bytes (H200 corpus timelines: 64.5 MiB + 256 for Llama-2-7B b2 x
#    2048, no dk/dv share; 257 MiB + 256 for Llama-3.1-8B b4 x 2048, GQA).
#  - unpacked_batches: transformers looks at position_ids' values to tell packed sequences from
#    one sequence per row (masking_utils.find_packed_sequence_indices); a fake tensor has no
#    values, and transformers then builds the packed-sequence mask, which turns SDPA from flash
#    to memory-efficient with a materialized mask (+40 MiB at Llama b2 x s1024, H200 trace vs
#    real, tests/data/h200/traced-2026-12-03). The engine's batches are one sequence per row, so
#    the trace answers "not packed" as the real run finds, after running the function's own ops
#    (the diff, the cumsum, the test of the last column: the small temporaries every real stream
#    shows at the start of each forward, tests/data/h200/traced-2026-12-04) up to the point where
#    it asks for a value.
#  - grouped_mm_scratch: each aten::_grouped_mm (MoE experts, forward and the two backward
#    products) takes the CUTLASS grouped GEMM's problem descriptors and workspace, 480 and 67,584
#    bytes for 8 or 60 experts, after its output and gives them back before it returns (H200,
#    Qwen3-MoE and gpt_oss streams; core/sim/ops.cpp groupedMm).
#  - efficient_scratch / efficient_bwd: the memory-efficient forward's 256-byte scratch (bf16, or
#    with a mask); in its backward, the delta (b x heads x s padded to 32, fp32), taken and given
#    back before dq, dk, dv are made. Not followed yet (core/sim/ops.cpp sdpaEfficient has them):
#    the delta staying alive while dq, dk, dv are made, and with a mask the gradient made
#    contiguous first and the fp32 dq accumulator after.
#  - safe_softmax: SDPA's math path (attention.cpp, _scaled_dot_product_attention_math) turns its
#    scores with at::_safe_softmax. On CUDA its real stream is the softmax's output, then the
#    -inf test of the scores (bool, their size), the all-masked rows (bool, a column) and a 4-byte
#    scalar, given back in reverse, and no copy after (Falcon's multi-query attention, H200,
#    tests/data/h200/traced-2026-12-04 falcon-*: the fake op made one more output of the scores'
#    size instead). The trace makes the softmax and those three.
#  - math_mask_in_place: the same math path adds the mask to the scores in place (attn.add_) for
#    plain tensors and out of place (attn.add) for a tensor subclass (areAnyTensorSubclassLike),
#    and a fake tensor is one: the fake run made one more scores-sized output there and freed the
#    matmul's after it. The trace runs the math path as attention.cpp writes it
#    (_scaled_dot_product_attention_math, PyTorch 2.5 and later: the fp32 upcast, the boolean
#    mask made additive, the GQA expansion, the second output made and dropped after the first)
#    from Python, where the add is in place on a fake tensor too: Falcon's forward stream is then
#    the real one, op for op (H200, falcon-alt-full).
#  - softmax_bwd_tmp: CUDA's softmax backward (SoftMax.cu softmax_backward_cuda_out) first makes
#    `tmp = grad * output`, a temporary of the gradient's size, after its output and freed before
#    it returns (H200 allocator history with C++ stacks, lab/mathsdpa.py: mul_Tensor under
#    structured_softmax_backward_cuda_out). Every softmax in backward: SDPA's math path (one more
#    fp32 scores-sized buffer per layer in Falcon's backward, the -5.4% / -7.4% allocated of
#    falcon-alt-full / -ckpt, tests/data/h200/traced-2026-12-04) and eager attention.
#  - plain_tensor_in_place: backward formulas that PyTorch writes twice, in place for plain
#    tensors and out of place for a tensor subclass (areAnyTensorSubclassLike; a dispatch mode
#    alone makes every tensor one), run in place as a CUDA step runs them. index_backward
#    _index_put_impl_s into its zeros; a fake tensor index_puts into a copy: an 18 MiB temporary
#    per layer for Falcon's fused_qkv[..., [-2], :], and reserved 7.0% under on falcon-alt-ckpt
#    (tests/data/h200/traced-2026-12-04 run 8; +0.000% with the rule, run 10). Not followed:
#    CUDA's index sort buffers (a few bytes each). The autograd engine's sum of two gradients
#    (input_buffer.cpp accumulate) has the same two branches; no traced type has shown it.
CUDA_RULES = ("cublas_workspace", "sdpa_choice", "unpacked_batches", "grouped_mm_scratch", "flash_fwd_scratch", "flash_bwd_workspace",
              "efficient_scratch", "efficient_bwd", "safe_softmax", "math_mask_in_place", "softmax_bwd_tmp",
              "plain_tensor_in_place")

_MATMULS = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "addmv", "mv", "_scaled_mm"}  # cuBLAS; _grouped_mm is CUTLASS
_FRAME_KEEP = ("transformers/", "peft/", "torch/optim", "torch/nn/functional", "torch/nn/modules",
               "torch/utils/checkpoint", "torch/distributed/fsdp", "hrengine/", "trl/", "tinylm")


def _blas_workspace_bytes():
    """CUBLAS_WORKSPACE_CONFIG=:SIZE_KIB:COUNT[:SIZE:COUNT...] as PyTorch reads it; 32 MiB
    (sm90's default, :4096:8) otherwise."""
    conf = os.environ.get("CUBLAS_WORKSPACE_CONFIG", "")
    total = 0
    parts = [p for p in conf.split(":") if p]
    try:
        for i in range(0, len(parts) - 1, 2):
            total += int(parts[i]) * 1024 * int(parts[i + 1])
    except ValueError:
        total = 0
    return total if total > 0 else 4096 * 1024 * 8


class AllocTrace:
    """A TorchDispatchMode (made in make_mode: its base class comes from torch) that records the
    storages of fake device tensors as an allocator trace in torch.cuda.memory._snapshot's
    format, so that trace.build_timeline turns it into a probe_timeline exactly as it does a
    recorded one."""

    def __init__(self, torch, device_type):
        self.t = torch
        self.dev = device_type
        self.entries = []      # {"action", "addr", "size", "time_us", "frames"}
        self.live = {}         # storage cdata -> (addr, size, weak ref)
        self.next_addr = depth.FIRST_ADDRESS
        self.allocated = 0
        self.backward = False  # inside loss.backward(): the autograd engine's thread
        self.handles = set()   # cuBLAS handles whose workspace exists
        self.blas_bytes = _blas_workspace_bytes() if device_type == "cuda" else 0
        self.marks = []
        from torch.multiprocessing.reductions import StorageWeakRef
        self._weak = StorageWeakRef
        self._expired = torch.UntypedStorage._expired
        self.ops = 0
        self.late = 0
        self.in_place = {}    # op -> times run in place (CUDA_RULES: plain_tensor_in_place)
        self.pending = set()  # storages with no known live tensor: the ones sweep() asks
        self.nref = {}        # storage -> its known live tensors
        self.refs = {}        # weak reference -> (storage, id of the tensor)
        self.ids = {}         # id of a tracked tensor -> its weak reference
        self.streams = False  # Note [Traced ranks]: record each block's stream
        self.subclasses = ()  # Note [Traced ranks]: tensor subclasses the mode steps aside for

    # -- storages
    def _frames(self):
        out = []
        f = sys._getframe(3)
        while f is not None and len(out) < 3:
            fn = f.f_code.co_filename
            if any(k in fn for k in _FRAME_KEEP) and "fake.py" not in fn:
                out.append({"filename": fn, "line": f.f_lineno, "name": f.f_code.co_name})
            f = f.f_back
        return out

    def _alloc(self, size, frames=None):
        addr = self.next_addr
        self.next_addr += depth.address_step(size)
        self.allocated += size
        self.entries.append({"action": "alloc", "addr": addr, "size": size, "time_us": len(self.entries),
                             "frames": frames if frames is not None else self._frames()})
        if self.streams:  # Note [Traced ranks]: the stream the block is pooled by
            self.entries[-1]["stream"] = self.t.cuda.current_stream().cuda_stream
        return addr

    def _free(self, addr, size):
        self.allocated -= size
        self.entries.append({"action": "free_completed", "addr": addr, "size": size, "time_us": len(self.entries)})

    def transient(self, size):
        """A kernel's scratch: taken and given back inside the op."""
        if size > 0:
            self._free(self._alloc(size), size)

    def sweep(self):
        """Frees: storages whose last tensor died since the last op. Only a storage none of whose
        known tensors is alive can have died (a live tensor holds its storage), so only those are
        asked (`pending`); a storage that autograd's saved copies still hold stays there until it
        dies."""
        if not self.pending:
            return
        dead = list(compress(self.pending, map(self._expired, self.pending)))  # in C: before every op
        # Frees found together go in the order their storages were made (a set's order follows
        # pointer values and changed from run to run; addresses here grow with each allocation).
        dead.sort(key=lambda c: self.live[c][0])
        for c in dead:
            self.pending.discard(c)
            addr, size, _ = self.live.pop(c)
            self.nref.pop(c, None)
            self._free(addr, size)

    def _count(self, cdata, delta):
        """One more or one fewer known live tensor of a storage; with none left it is asked."""
        n = self.nref.get(cdata, 0) + delta
        self.nref[cdata] = n
        if n <= 0 and cdata in self.live:
            self.pending.add(cdata)
        elif delta > 0:
            self.pending.discard(cdata)

    def _died(self, ref):
        c = self.refs.pop(ref, None)
        if c is None:
            return
        self.ids.pop(c[1], None)
        self._count(c[0], -1)

    def track(self, x, cdata):
        """Counts x among its storage's live tensors (a weak reference tells when it dies)."""
        i = id(x)
        r = self.ids.get(i)
        if r is not None and r() is x:
            return
        r = weakref.ref(x, self._died)
        self.ids[i] = r
        self.refs[r] = (cdata, i)
        self._count(cdata, +1)

    def adopt(self, x):
        """Records x's storage if it is new (a view or an in-place result shares its base's)."""
        if not isinstance(x, self.t.Tensor) or x.device.type != self.dev:
            return None
        st = untyped_storage(x)
        w = self._weak(st)
        e = self.live.get(w.cdata)
        if e is None:
            size = int(st.nbytes())
            e = (self._alloc(size), size, w)
            self.live[w.cdata] = e
        self.track(x, w.cdata)
        return e[0]

    def storage_freed(self, x):
        """Note [Traced ranks]: x's storage resized to nothing (FSDP2's free_storage)."""
        c = self._weak(untyped_storage(x)).cdata
        e = self.live.pop(c, None)
        self.pending.discard(c)
        if e is not None:
            self._free(e[0], e[1])

    def storage_resized(self, x):
        """Note [Traced ranks]: x's storage given its bytes again (FSDP2's alloc_storage)."""
        self.storage_freed(x)
        self.adopt(x)

    def hold(self, tensors):
        """Tensors the program keeps (parameters, buffers, optimizer state, batches) that no op
        returned as such: counted as live so that their storages are not asked each op."""
        for x in tensors:
            if isinstance(x, self.t.Tensor) and x.device.type == self.dev:
                c = self._weak(untyped_storage(x)).cdata
                if c in self.live:
                    self.track(x, c)

    def addr_of(self, x):
        st = untyped_storage(x)
        v = self.live.get(self._weak(st).cdata)
        return v[0] if v else None

    def revalidate(self):
        """At each phase mark: a tracked tensor whose storage was replaced without an op
        (`param.data = new`, which nn.Module._apply does) counts for its new storage, and every
        live storage is asked once; a free found here and not by sweep() is counted in `late` (0
        in the tests: the step's frees are all found at the op after them)."""
        for r, (c, i) in list(self.refs.items()):
            x = r()
            if x is None:
                continue
            c2 = self._weak(untyped_storage(x)).cdata
            if c2 != c:
                self.refs[r] = (c2, i)
                self._count(c, -1)
                if c2 in self.live:
                    self._count(c2, +1)
        self.sweep()
        keys = self.live.keys()
        dead = list(compress(keys, map(self._expired, keys)))
        self.late += len(dead)
        self.pending.update(dead)
        self.sweep()

    def mark(self, label):
        self.revalidate()
        self.marks.append((label, len(self.entries), self.allocated))

    # -- rules
    def before(self, name, args, kwargs):
        if name in _MATMULS and self.blas_bytes:
            h = 1 if self.backward else 0  # see CUDA_RULES: cublas_workspace
            if h not in self.handles:
                self.handles.add(h)
                return ("blas", h)
        return None

    def after(self, name, args, out):
        if self.dev != "cuda":
            return
        if name == "_grouped_mm":  # see CUDA_RULES: grouped_mm_scratch
            a = self._alloc(480)
            self.transient(67584)
            self._free(a, 480)
        elif name == "_scaled_dot_product_flash_attention":
            self.transient(256)
        elif name == "_scaled_dot_product_flash_attention_backward":
            q, k, v = args[1], args[2], args[3]
            b, h, s, d = q.shape
            shared = b * s * h * (d + v.shape[-1]) * q.element_size() if k.shape[1] < h else 0
            self.transient(b * s * h * d * 4 + shared + b * h * s * 4 + 256)
        elif name == "_softmax_backward_data":  # see CUDA_RULES: softmax_bwd_tmp
            grad, output = args[0], args[1]
            dt = self.t.promote_types(grad.dtype, output.dtype)
            bits = self.t.finfo(dt).bits if dt.is_floating_point else self.t.iinfo(dt).bits
            self.transient(grad.numel() * bits // 8)
        elif name == "_efficient_attention_forward" or name == "_scaled_dot_product_efficient_attention":
            bias = args[3] if len(args) > 3 else None
            if bias is not None or args[0].dtype != self.t.float32:
                self.transient(256)


class _ConvertInPlace:
    """module.to() over fake parameters: nn.Module._apply swaps a fake parameter with its
    converted copy (torch.utils.swap_tensors), which refuses a tensor that FakeTensorMode holds a
    weak reference to. There the parameter takes the copy's data instead (.data =, what _apply
    does for plain tensors): the old storage is freed and the new one kept, as in a real run. FSDP2's
    move of a unit to the GPU goes through it too (ranks.storage_resizes)."""

    def __init__(self, torch):
        self.t = torch

    def __enter__(self):
        u = self.t.utils
        self.old = getattr(u, "swap_tensors", None)
        if self.old is None:
            return self
        old, torch = self.old, self.t

        def swap(t1, t2):
            if t1 is t2:
                return
            try:
                old(t1, t2)
            except RuntimeError:
                with torch.no_grad():
                    t1.data = t2
                if hasattr(t2, "fake_device"):  # FakeTensor keeps its device in Python too
                    t1.fake_device = t2.fake_device
        u.swap_tensors = swap
        return self

    def __exit__(self, *a):
        if self.old is not None:
            self.t.utils.swap_tensors = self.old


class _UnpackedBatches:
    """See CUDA_RULES: unpacked_batches."""

    def __enter__(self):
        self.mod = sys.modules.get("transformers.masking_utils")
        if self.mod is None:
            try:
                import transformers.masking_utils as mod
                self.mod = mod
            except Exception:
                self.mod = None
        self.old = getattr(self.mod, "find_packed_sequence_indices", None) if self.mod else None
        self.old_tracing = getattr(self.mod, "is_tracing", None) if self.mod else None
        if self.old is not None:
            old, mod, old_tracing = self.old, self.mod, self.old_tracing

            def not_packed(position_ids):
                # Its ops on the fake position_ids, as the real run makes them; the data-dependent
                # test at its end cannot be answered by a fake tensor and raises.
                if old_tracing is not None:
                    mod.is_tracing = lambda *a, **k: False
                try:
                    old(position_ids)
                except Exception:
                    pass
                finally:
                    if old_tracing is not None:
                        mod.is_tracing = old_tracing
                return None

            self.mod.find_packed_sequence_indices = not_packed
        return self

    def __exit__(self, *a):
        if self.old is not None:
            self.mod.find_packed_sequence_indices = self.old


def make_mode(torch, rec):
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recording(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if rec.subclasses and any(issubclass(t, rec.subclasses) for t in types):
                return NotImplemented  # Note [Traced ranks]: its local ops come back here
            kwargs = kwargs or {}
            name = func.__name__.split(".")[0] if hasattr(func, "__name__") else str(func)
            rec.ops += 1
            if getattr(func, "namespace", "") == "profiler" or "profiler" in str(func).split(".")[:1]:
                # record_function's markers hold no memory (FakeTensorMode of torch 1.13 trips on them)
                from torch.utils._mode_utils import no_dispatch
                with no_dispatch():
                    return func(*args, **kwargs)
            if name == "_fused_sdp_choice" and rec.dev == "cuda":
                return sdpa_choice(torch, *args, **kwargs)
            rec.sweep()
            pre = rec.before(name, args, kwargs)
            if name == "_efficient_attention_backward" and rec.dev == "cuda":
                _efficient_backward_before(torch, rec, args)
            safe_softmax = name == "_safe_softmax" and rec.dev == "cuda"
            in_place = _plain_tensor_in_place(torch, rec, name, args, kwargs) if rec.backward else None
            if safe_softmax:
                out = _softmax_of(torch, *args, **kwargs)
            elif in_place is not None:
                rec.in_place[name] = rec.in_place.get(name, 0) + 1
                out = in_place()
            else:
                out = func(*args, **kwargs)
            flat = out if isinstance(out, (list, tuple)) else (out,)
            for o in flat:
                if isinstance(o, (list, tuple)):
                    for oo in o:
                        rec.adopt(oo)
                else:
                    rec.adopt(o)
            if pre is not None and pre[0] == "blas":
                rec._alloc(rec.blas_bytes, [{"filename": "cublas", "line": 0, "name": "workspace"}])
            if safe_softmax:
                _safe_softmax_scratch(rec, args[0], args[1] if len(args) > 1 else kwargs.get("dim", -1))
            rec.after(name, args, out)
            return out

    return Recording()


def _plain_tensor_in_place(torch, rec, name, args, kwargs):
    """See CUDA_RULES: plain_tensor_in_place. In backward: the in-place form of an op PyTorch
    writes out of place for a tensor subclass, as a function to call instead, or None."""
    if rec.dev != "cuda":
        return None
    if name == "index_put":
        accumulate = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
        if accumulate and len(args) >= 3:
            return lambda: torch.ops.aten._index_put_impl_.default(args[0], args[1], args[2], True, True)
    return None


def _softmax_of(torch, x, dim, dtype=None):
    """See CUDA_RULES: safe_softmax. The output as at::softmax makes it."""
    if dtype is not None and dtype != x.dtype:
        x = x.to(dtype)
    return torch.ops.aten._softmax.default(x, dim, False)


def _safe_softmax_scratch(rec, x, dim):
    """See CUDA_RULES: safe_softmax. The -inf test, the all-masked rows and the scalar, freed in
    reverse, after the output."""
    numel = x.numel()
    rows = numel // max(1, x.shape[dim]) if x.dim() else numel
    mask = rec._alloc(numel)
    masked_rows = rec._alloc(rows)
    scalar = rec._alloc(4)
    rec._free(scalar, 4)
    rec._free(masked_rows, rows)
    rec._free(mask, numel)


def _efficient_backward_before(torch, rec, args):
    # aten::_efficient_attention_backward(grad_out, q, k, v, bias, out, cu_q, cu_k, max_q, max_k,
    # logsumexp, ...): see CUDA_RULES: efficient_bwd.
    q = args[1]
    b, s, h, _ = q.shape  # this op's layout is (b, s, heads, d)
    s32 = (s + 31) // 32 * 32
    rec.transient(b * h * s32 * 4)


def sdpa_choice(torch, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """See CUDA_RULES: sdpa_choice. Returns torch's SDPBackend value (math 0, flash 1, efficient 2).
    Both fused kernels need one batch size, and one head count for q, k and v unless enable_gqa
    asks for grouped heads (sdp_utils check_batch_size_and_num_heads_dense): Falcon's multi-query
    attention hands SDPA one key head for 16 query heads and runs the math path."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return 0
    if not (q.shape[0] == k.shape[0] == v.shape[0]):
        return 0
    hq, hk, hv = q.shape[-3], k.shape[-3], v.shape[-3]
    if not (hq == hk == hv or (enable_gqa and hk == hv and hk > 0 and hq % hk == 0)):
        return 0
    half = q.dtype in (torch.float16, torch.bfloat16)
    d = q.shape[-1]
    same = k.shape[-1] == d and v.shape[-1] == d and k.dtype == q.dtype and v.dtype == q.dtype
    if half and attn_mask is None and same and d % 8 == 0 and d <= 256:
        return 1
    if (half and d % 8 == 0) or (q.dtype == torch.float32 and d % 4 == 0):
        return 2
    return 0


class _MathMaskInPlace:
    """See CUDA_RULES: math_mask_in_place. Replaces torch.nn.functional.scaled_dot_product_attention
    while the trace runs; where the backend is the math path, runs it as attention.cpp does."""

    def __init__(self, torch):
        self.t = torch
        self.old = None

    def __enter__(self):
        torch = self.t
        F = torch.nn.functional
        if not hasattr(torch.ops.aten, "_safe_softmax"):  # before PyTorch 2.5: another math path
            return self
        self.old = F.scaled_dot_product_attention
        old = self.old

        def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
            if query.device.type != "cuda" or query.is_nested or sdpa_choice(
                    torch, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa) != 0:
                return old(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                           scale=scale, enable_gqa=enable_gqa)
            return _sdpa_math(torch, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)

        F.scaled_dot_product_attention = sdpa
        return self

    def __exit__(self, *a):
        if self.old is not None:
            self.t.nn.functional.scaled_dot_product_attention = self.old


def _additive_mask(torch, mask, dtype):
    """attention.cpp convert_boolean_attn_mask: a boolean mask as 0 / -inf in dtype."""
    if mask is None or mask.dtype != torch.bool:
        return mask
    return torch.where(mask, 0.0, torch.scalar_tensor(float("-inf"), dtype=dtype, device=mask.device))


def _sdpa_math(torch, query_, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa):
    """attention.cpp scaled_dot_product_attention's math case and _scaled_dot_product_attention_math,
    op for op (PyTorch 2.11), with the mask added in place."""
    import math
    origin = query_.dtype
    low = (torch.float16, torch.bfloat16)
    allowed = getattr(torch.backends.cuda, "fp16_bf16_reduction_math_sdp_allowed", lambda: False)()
    mask = _additive_mask(torch, attn_mask, query_.dtype)
    query_acc = query_.to(torch.float32) if not allowed and query_.dtype in low else query_
    key_acc = key.to(torch.float32) if not allowed and key.dtype in low else key
    value_acc = value.to(torch.float32) if not allowed and value.dtype in low else value
    negative = scale is not None and scale < 0.0
    base = abs(scale) if negative else scale
    if base is None:
        base = 1.0 / math.sqrt(query_acc.shape[-1])
    factor = math.sqrt(base)
    query = query_acc * (0.0 - factor if negative else factor)
    if is_causal:
        L, S = query.shape[-2], key_acc.shape[-2]
        mask = _additive_mask(torch, torch.ones((L, S), dtype=torch.bool, device=query.device).tril(), query.dtype)
    key_e, value_e = key_acc, value_acc
    if enable_gqa and query.shape[-3] != key_acc.shape[-3]:
        key_e = key_acc.repeat_interleave(query.shape[-3] // key_acc.shape[-3], -3)
        value_e = value_acc.repeat_interleave(query.shape[-3] // value_acc.shape[-3], -3)
    attn = torch.matmul(query, key_e.transpose(-2, -1) * factor)
    if mask is not None:
        attn.add_(mask)
    attn = torch.ops.aten._safe_softmax.default(attn, -1)
    if dropout_p > 0.0:
        attn = torch.dropout(attn, dropout_p, True)
    # make_tuple's arguments, evaluated right to left as GCC does (the real stream: the
    # probabilities' copy in the input dtype before the output's matmul; the tuple's second
    # element is dropped by the caller, after the output is made)
    probs = attn.to(origin)
    out = torch.matmul(attn, value_e).to(origin)
    del probs
    return out


def refuse_untraceable(cfg):
    for cond, field, value, why in (
            (cfg["finetune"] == "qlora", "config.finetune", "qlora", "bitsandbytes' 4-bit kernels have no fake-tensor form yet"),
            (cfg["optimizer"] in ("adamw-8bit", "paged-adamw-8bit", "lion"), "config.optimizer", cfg["optimizer"],
             "bitsandbytes' optimizers have no fake-tensor form yet"),
            (cfg["loss"] == "fused", "config.loss", "fused", "Liger's Triton kernels have no fake-tensor form yet"),
            (cfg["activation_offload"], "config.activation_offload", "true", "host copies are not traced yet"),
            (cfg.get("vision") is not None, "config.vision", "images",
             "the vision tower reads its patch grid's values, which fake tensors do not hold")):
        if cond:
            raise BadRequest(field, value, f"cannot be traced: {why} (measure it on a GPU instead)")


def _trace_once(torch, R, factory, dev, info, progress, signatures=False, D=None):
    """One traced step pair (a warm-up step and a steady one) of the request's model: the
    allocator entries, the phase marks, and what categorises them; with `signatures`, its
    layers' (Note [Traced depth]); with D, rank 0's of FSDP2 over D.world ranks (Note [Traced ranks])."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    cfg = R["config"]
    if cfg["attention"] == "flash":  # Note [Flash kernels]: flash-attn has no fake-tensor form; SDPA's flash kernel
        cfg = dict(cfg, attention="sdpa")
        R = dict(R, config=cfg)
    rec = AllocTrace(torch, dev)
    mode = make_mode(torch, rec)
    fake = FakeTensorMode()
    device = torch.device(dev)
    b, s, ga = cfg["micro_batch"], cfg["seq_len"], cfg["grad_accum"]
    steps = 1  # a warm-up step (optimizer state appears at its step()) and one steady step
    t0 = time.time()
    if D is not None:
        rec.streams, rec.subclasses = True, ranks.subclasses(torch)
    with _ConvertInPlace(torch), _MathMaskInPlace(torch) if dev == "cuda" else _Null(), \
            _UnpackedBatches() if factory is None else _Null(), \
            ranks.storage_resizes(rec) if D is not None else _Null(), fake, mode:
        if D is None:
            model = build_model(torch, R, device, factory, info)
        else:  # built on the CPU, each unit moved and sharded by its fully_shard (step.py)
            info["fsdp_build"] = "cpu, moved per unit by fully_shard"
            model, _ = wrap_parallel(torch, build_model(torch, R, torch.device("cpu"), factory, info), R, D, True, info)
        sync = gradient_sync_control(model, D) if D is not None else (lambda last: _Null())
        params = [p for p in model.parameters() if p.requires_grad]
        if not params:
            raise BadRequest("config.finetune", cfg["finetune"], "leaves no trainable parameter")
        opt = build_optimizer(torch, cfg, params, info)
        vocab = int(R["hf_config"].get("vocab_size") or getattr(getattr(model, "config", None), "vocab_size", 0) or 0)
        if vocab <= 0:
            raise BadRequest("model.config.vocab_size", "(missing)", "needed for the batch")
        batches = [torch.zeros((b, s), dtype=torch.long, device=device) for _ in range(ga)]
        rec.hold([ranks.local(x) for x in list(model.parameters()) + list(model.buffers())] + batches)
        t_build = time.time() - t0
        rec.mark({"step": 0, "phase": "after_load", "micro_batch": 0})
        amp = {"amp-bf16": torch.bfloat16, "amp-fp16": torch.float16}.get(cfg["precision"])
        if cfg["precision"] == "amp-fp16":
            raise BadRequest("config.precision", "amp-fp16", "cannot be traced yet (the GradScaler's inf checks read values)")
        for k in range(1 + steps):
            for m in range(ga):
                check_stop()
                rec.mark({"step": k, "phase": "forward", "micro_batch": m})
                if amp is not None:
                    with torch.autocast(dev, dtype=amp):
                        loss = model(input_ids=batches[m], labels=batches[m]).loss
                else:
                    loss = model(input_ids=batches[m], labels=batches[m]).loss
                if ga > 1:
                    loss = loss / ga
                rec.mark({"step": k, "phase": "backward", "micro_batch": m})
                progress(k, m, (k * (2 * ga + 1) + 2 * m + 1) / ((1 + steps) * (2 * ga + 1)))
                rec.backward = True
                try:
                    with sync(m == ga - 1):
                        loss.backward()
                finally:
                    rec.backward = False
                del loss
            rec.mark({"step": k, "phase": "optimizer", "micro_batch": 0})
            if k == steps:
                grad_addrs = {rec.addr_of(ranks.local(p.grad)) for p in params if p.grad is not None}
            opt.step()
            opt.zero_grad(set_to_none=True)
            if k == 0:  # the state the first step made
                rec.hold([ranks.local(v) for v in state_tensors(opt)])
        rec.mark({"step": steps, "phase": "end", "micro_batch": 0})
        persistent = {}
        for p in model.parameters():
            a = rec.addr_of(ranks.local(p))
            if a is not None:
                persistent[a] = "weights"
        for v in state_tensors(opt):
            a = rec.addr_of(ranks.local(v))
            if a is not None:
                persistent[a] = "optimizer_state"
        layers = [depth.layer_signature(torch, layer) for layer in find_layers(model)] if signatures else None
        return {"entries": rec.entries, "marks": rec.marks, "persistent": persistent, "grads": grad_addrs - {None},
                "layout": describe_parameters(model), "total": sum(p.numel() for p in model.parameters()),
                "trainable": sum(p.numel() for p in params), "vocab": vocab, "layers": layers,
                "build_s": t_build, "ops": rec.ops, "late": rec.late, "in_place": dict(rec.in_place)}


def trace(args, R, out, factory, torch, t_start):
    """Builds and steps the model on fake tensors; writes the probe_timeline to args.timeline."""
    cfg = R["config"]
    refuse_untraceable(cfg)
    if not args.timeline:
        raise BadRequest("--timeline", "(missing)", "--trace writes the traced timeline there")
    try:
        __import__("torch._subclasses.fake_tensor")  # fake tensors: PyTorch 2.0 and later
    except ImportError:
        raise Missing(f"tracing needs PyTorch with fake tensors (2.0 or later); this interpreter has {torch.__version__}")
    cuda_built = bool(getattr(torch.backends, "cuda", None) and torch.backends.cuda.is_built())
    dev = "cuda" if cuda_built and R["device"] != "cpu" else "cpu"
    info = {"engine_version": VERSION, "python": sys.version.split()[0], "torch": torch.__version__,
            "traced_device": dev, "cuda_rules": list(CUDA_RULES) if dev == "cuda" else []}
    if dev == "cuda" and not torch.cuda.is_available():
        raise Missing("tracing a CUDA step needs PyTorch to see a CUDA device (any size: nothing is allocated on it), "
                      "because the autograd engine asks the driver for it in backward; this machine has none. "
                      "Trace on a machine with a GPU, or measure there", "device")
    D = ranks.fake_ranks(torch, cfg, args, dev)  # Note [Traced ranks]
    b, s = cfg["micro_batch"], cfg["seq_len"]
    steps = 1
    out.emit({"event": "progress", "step": 0, "phase": "forward", "fraction": 0.0})
    t0 = time.time()
    plan = depth.plan(torch, R, factory, info) if getattr(args, "trace_by_depth", False) and D is None else None
    run = None
    if plan is not None:
        L, k, P, sigs = plan
        depths = (k, k + P, k + 2 * P)
        runs = []
        for i, d in enumerate(depths):
            def progress(step, m, frac, i=i):
                out.emit({"event": "progress", "step": step, "phase": "backward", "micro_batch": m,
                          "fraction": round((i + frac) / len(depths), 4)})
            runs.append(_trace_once(torch, depth.at_depth(R, d, L), factory, dev, info, progress, signatures=True))
        try:
            run = depth.extrapolate(runs, L, k, P, sigs)
            info["depth"] = f"traced at depths {k}, {k + P} and {k + 2 * P}, extrapolated to {L} (its layers repeat every {P})"
        except depth.NotPeriodic as e:
            info["depth"] = f"traced at full depth ({e})"
    if run is None:
        def progress(step, m, frac):
            out.emit({"event": "progress", "step": step, "phase": "backward", "micro_batch": m, "fraction": round(frac, 4)})
        run = _trace_once(torch, R, factory, dev, info, progress, D=D)
    t_trace = time.time() - t0
    tl = build_timeline(run["entries"], run["marks"], run["persistent"], run["grads"], b * s * run["vocab"])
    for name in ("transformers", "peft"):
        mod = sys.modules.get(name)
        if mod is not None:
            info[name] = getattr(mod, "__version__", "?")
    tl.update({"schema_version": SCHEMA_VERSION, "kind": "probe_timeline", "engine": "trace", "device": dev,
               "config": cfg, "model_id": R["model_id"], "model_type": str(R.get("model_type") or ""), "step": steps,
               "model_layout": run["layout"], "parameters": {"total": run["total"], "trainable": run["trainable"]},
               "engine_info": info, "timing": {"build_s": round(run["build_s"], 3), "trace_s": round(t_trace, 3),
                                               "ops": run["ops"], "late_frees": run["late"], "in_place": run["in_place"],
                                               "wall_s": round(time.time() - t_start, 3)}})
    try:
        write_atomically(args.timeline, tl, indent=None)
    except OSError as e:
        raise BadRequest("--timeline", args.timeline, f"cannot write the file ({e.strerror})")
    out.emit({"event": "progress", "step": steps, "phase": "optimizer", "fraction": 1.0})
    print(f"headroom-engine: traced {len(run['entries'])} allocator events from {run['ops']} ops in {t_trace:.2f} s "
          f"({dev}, torch {torch.__version__}{', transformers ' + info['transformers'] if 'transformers' in info else ''})",
          file=sys.stderr)
    return 0
