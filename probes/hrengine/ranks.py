"""Note [Traced ranks]: FSDP2 (ZeRO-2/3) traced as rank 0 of N sees it, in one process.

The trace runs the engine's own FSDP2 wrapping (parallel.wrap_parallel: fully_shard on every
decoder layer, then the root) over PyTorch's fake process group (the "fake" backend of
torch.testing._internal.distributed.fake_pg, world size N, rank 0): every collective is a call
that moves no data, so one process makes the allocations rank 0 makes. The model is built on the
CPU and each fully_shard moves its unit to the GPU and shards it, as accelerate's FSDP2 reaches a
Trainer's model (step.py), so the GPU never holds the whole model.

What the fake tensors cannot tell by themselves, and how the trace follows it:
- FSDP2 frees an unsharded parameter and its all-gather output by resizing their storages to
  zero (free_storage) and makes them again by resizing back (alloc_storage); the storage object
  lives on. Those two functions are wrapped: a resize to zero is a free of the storage's block and
  a resize back a new allocation, as the caching allocator sees them.
- Parameters, gradients and optimizer state are DTensors, whose memory is their local shard: the
  trace's dispatch mode steps aside for DTensor (its ops reach the mode again as the local ops
  DTensor runs) and reads addresses from the local tensors.
- FSDP2's all-gather and reduce-scatter buffers are made on its own CUDA streams: each allocation
  carries the stream current when it was made (the caching allocator pools blocks by stream).
The device mesh is made before the fake tensor mode starts (DeviceMesh builds a real tensor).
DDP and ZeroRedundancyOptimizer (ZeRO-0/1) and DeepSpeed are measured, not traced.
"""
import contextlib
import types

from .protocol import BadRequest, Missing, short


def fake_ranks(torch, cfg, args, dev):
    """The Dist-like description of the traced ranks and the device mesh, or None for one GPU."""
    world = cfg["world_size"]
    if world <= 1:
        return None
    if not getattr(args, "trace_ranks", False):
        raise BadRequest("config.world_size", world, "cannot be traced: the trace follows one GPU; several are measured, "
                         "not traced, yet (--trace-ranks traces FSDP2's rank 0, experimental)")
    if cfg["zero_stage"] < 2 or getattr(args, "sharding", "fsdp") != "fsdp":
        what = "DeepSpeed" if getattr(args, "sharding", "fsdp") != "fsdp" else f"ZeRO-{cfg['zero_stage']} (DDP)"
        raise BadRequest("config.zero_stage", cfg["zero_stage"],
                         f"{what} is measured, not traced yet; the trace follows FSDP2 (ZeRO-2/3)")
    if dev != "cuda":
        raise BadRequest("config.world_size", world, "several ranks are traced as CUDA runs them (a GPU visible)")
    try:
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.testing._internal.distributed.fake_pg import FakeStore
    except Exception as e:
        raise Missing(f"tracing several ranks needs torch.distributed's fake process group "
                      f"(PyTorch 2.4 or later; this is {torch.__version__}): {short(str(e), 100)}")
    if not dist.is_initialized():
        dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())
    torch.cuda.set_device(0)
    mesh = init_device_mesh("cuda", (world,))
    # what wrap_parallel and gradient_sync_control read of parallel.Dist, and the mesh
    return types.SimpleNamespace(enabled=True, zero=cfg["zero_stage"], sharding="fsdp", world=world, mesh=mesh)


def local(x):
    """A DTensor's local shard (its memory); any other tensor itself."""
    return getattr(x, "_local_tensor", x)


def subclasses(torch):
    """The tensor subclasses the dispatch mode steps aside for (see the note)."""
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:
        from torch.distributed._tensor import DTensor
    return (DTensor,)


@contextlib.contextmanager
def storage_resizes(rec):
    """FSDP2's free_storage / alloc_storage as frees and allocations of the trace, and its move of
    each unit to the GPU (see the note)."""
    import importlib
    import itertools
    mods = []
    for name in ("_fsdp_param", "_fsdp_collectives", "_fsdp_param_group", "_fsdp_common", "_fsdp_init", "_fully_shard"):
        try:
            mods.append(importlib.import_module(f"torch.distributed.fsdp._fully_shard.{name}"))
        except ImportError:
            pass
    names = ("free_storage", "alloc_storage", "_move_states_to_device")
    saved = [(m, n, getattr(m, n)) for m in mods for n in names if hasattr(m, n)]
    real = {n: f for _, n, f in saved}
    if any(n not in real for n in names):
        raise Missing("this PyTorch's FSDP2 has no free_storage, alloc_storage or _move_states_to_device to follow "
                      "(the trace knows 2.6 to 2.11)")

    def move(params, buffers, device, *rest, **kw):
        # FSDP2's own move swaps with `.data =`, which a fake tensor takes without its Python-side
        # device (FakeTensor.fake_device): moved first through torch.utils.swap_tensors, which the
        # trace's _ConvertInPlace (fake.py) makes carry the device; FSDP2's then skips them
        for t in itertools.chain(params, buffers):
            if t.device == device or t.device.type == "meta" or not hasattr(t, "fake_device"):
                continue
            rec.t.utils.swap_tensors(t, t.to(device))
            rec.adopt(t)  # the moved storage's tensor now
        return real["_move_states_to_device"](params, buffers, device, *rest, **kw)

    def free_storage(tensor):
        rec.storage_freed(tensor)
        real["free_storage"](tensor)

    def alloc_storage(tensor):
        real["alloc_storage"](tensor)
        rec.storage_resized(tensor)

    for m, n, _ in saved:
        setattr(m, n, {"free_storage": free_storage, "alloc_storage": alloc_storage, "_move_states_to_device": move}[n])
    try:
        yield
    finally:
        for m, n, f in saved:
            setattr(m, n, f)
