"""Several ranks: the process group, DDP, ZeroRedundancyOptimizer, FSDP2 or DeepSpeed, and
torchrun to start them."""
import contextlib
import os
import socket
import sys

from .build import find_layers, require
from .protocol import EXIT_INTERNAL, EXIT_NO_DEVICE, EXIT_OK, Missing, short

# The script torchrun starts on every rank: the engine's entry point beside this package.
ENTRY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "headroom_engine.py")


class Dist:
    def __init__(self, torch, args, cfg):
        self.t = torch
        self.rank = int(os.environ.get("RANK", "0"))
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.local = int(os.environ.get("LOCAL_RANK", "0"))
        self.enabled = self.world > 1 or "RANK" in os.environ
        self.share = args.share_gpu
        self.sharding = args.sharding
        self.backend = None
        self.zero = cfg["zero_stage"]
        self.ddp = self.enabled and self.zero == 0

    def device_index(self):
        return 0 if self.share else self.local

    def init(self, cuda):
        if not self.enabled:
            return
        import torch.distributed as dist
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
        self.backend = "nccl" if cuda and not self.share else "gloo"
        kw = {"backend": self.backend}
        if cuda and self.backend == "nccl":
            kw["device_id"] = self.t.device("cuda", self.device_index())
        try:
            dist.init_process_group(**kw)
        except TypeError:
            kw.pop("device_id", None)
            dist.init_process_group(**kw)

    def close(self):
        if self.enabled:
            import torch.distributed as dist
            if dist.is_initialized():
                try:
                    dist.destroy_process_group()
                except Exception:
                    pass


@contextlib.contextmanager
def in_place_init_sync(torch):
    """CPU mode only. DDP's constructor checks the parameter shapes and broadcasts rank 0's
    parameters through flat temporaries (dist._verify_params_across_processes,
    dist._broadcast_coalesced). Whichever thread drops the last reference frees them: the main
    thread or one of Gloo's workers, a race. The profiler does not follow Gloo's threads, so a free
    there is never recorded and that rank's bytes stay too high for the rest of the run (by the
    model's size: a rank spread of 1.11 on the tiny test model). Here the same broadcast is made
    tensor by tensor, in place, into tensors the module keeps, and the shape check (every rank
    builds the same model from the same request) is skipped. On CUDA the allocator's own counters
    see every thread, and DDP runs unchanged."""
    import torch.distributed as dist
    saved = {n: getattr(dist, n, None) for n in ("_broadcast_coalesced", "_verify_params_across_processes")}

    def broadcast(group, tensors, buffer_size, src):
        with torch.no_grad():
            for t in tensors:
                dist.broadcast(t, src, group=group)

    dist._broadcast_coalesced = broadcast
    dist._verify_params_across_processes = lambda *a, **k: None
    try:
        yield
    finally:
        for n, f in saved.items():
            if f is None:
                delattr(dist, n)
            else:
                setattr(dist, n, f)


def wrap_parallel(torch, model, R, D, cuda, info):
    """DDP (ZeRO-0), DDP + ZeroRedundancyOptimizer (ZeRO-1), FSDP2 fully_shard (ZeRO-2: reshard
    after forward off; ZeRO-3: on), or DeepSpeed when --sharding deepspeed."""
    cfg = R["config"]
    if not D.enabled:
        return model, "none"
    if D.sharding == "deepspeed":
        require("deepspeed", "--sharding deepspeed")
        return model, "deepspeed"
    if D.zero <= 1:
        from torch.nn.parallel import DistributedDataParallel as DDP
        kw = {"device_ids": [D.device_index()]} if cuda else {}
        info["sharding"] = "ddp" if D.zero == 0 else "ddp+zero_redundancy_optimizer"
        with (contextlib.nullcontext() if cuda else in_place_init_sync(torch)):
            return DDP(model, **kw), info["sharding"]
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except Exception as e:  # ImportError, or 1.13's dataclass error on Python 3.11
        raise Missing(f"ZeRO-2/3 need FSDP2 (torch.distributed.fsdp.fully_shard, PyTorch >= 2.6; this is "
                      f"{torch.__version__}): {short(str(e), 100)}")
    mp = {}
    if cfg["precision"] in ("amp-bf16", "amp-fp16"):
        low = torch.bfloat16 if cfg["precision"] == "amp-bf16" else torch.float16
        mp["mp_policy"] = MixedPrecisionPolicy(param_dtype=low, reduce_dtype=torch.float32)
    if getattr(D, "mesh", None) is not None:  # the trace's mesh over the fake process group (Note [Traced ranks])
        mp["mesh"] = D.mesh
    reshard = D.zero == 3
    for layer in find_layers(model):
        fully_shard(layer, reshard_after_forward=reshard, **mp)
    fully_shard(model, reshard_after_forward=reshard, **mp)
    info["sharding"] = f"fsdp2(reshard_after_forward={reshard})"
    return model, info["sharding"]


def parameters_sum(torch, model, D):
    total = 0.0
    with torch.no_grad():
        for p in model.parameters():
            if not p.requires_grad:
                continue
            local = p.to_local() if hasattr(p, "to_local") else p
            total += float(local.double().sum())
    if D.enabled and D.zero >= 2:
        import torch.distributed as dist
        t = torch.tensor([total], dtype=torch.float64, device="cpu" if D.backend == "gloo" else "cuda")
        dist.all_reduce(t)
        total = float(t[0])
    return total


def torchrun(nproc, argv):
    """headroom-probe --nproc N: torch.distributed.run in this process, which starts N copies
    of this engine (RANK, WORLD_SIZE, LOCAL_RANK and the rendezvous in their environment)."""
    try:
        from torch.distributed import run as trun
    except ImportError as e:
        print(f"headroom-engine: torch.distributed.run is not importable: {e}", file=sys.stderr)
        return EXIT_NO_DEVICE
    try:  # PyTorch 1.13 on Python 3.11: Std.from_str returns None for "0" (IntFlag membership)
        from torch.distributed.elastic.multiprocessing import api as mp_api
        if mp_api.Std.from_str("0") is None:
            orig = mp_api.Std.from_str
            mp_api.Std.from_str = classmethod(lambda cls, vm: cls(int(vm)) if vm.isdigit() else orig(vm))
    except Exception:
        pass
    rest, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "--torchrun":
            skip = True
            continue
        if a.startswith("--torchrun="):
            continue
        rest.append(a)
    # The ranks meet on this machine through the loopback address and a free port: torchrun's
    # static rendezvous with --master_addr 127.0.0.1, not --standalone (whose c10d rendezvous
    # resolves "localhost", which a container or a minimal root may not map: gai error -2), and
    # Gloo on the loopback interface rather than on whatever the hostname resolves to. Nothing in
    # the launch asks the name service.
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    try:
        trun.main(["--nnodes", "1", "--node_rank", "0", "--master_addr", "127.0.0.1", "--master_port", str(port),
                   "--nproc_per_node", str(nproc), ENTRY] + rest)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else EXIT_INTERNAL
    except BaseException as e:  # a rank failed: its own error file says why
        print(f"headroom-engine: torchrun: {type(e).__name__}: {short(str(e), 300)}", file=sys.stderr)
        return EXIT_INTERNAL
    return EXIT_OK


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def gradient_sync_control(model, D):
    """Accumulation without a collective per micro-batch, as accelerate does it: DDP's no_sync,
    FSDP2's set_requires_gradient_sync."""
    import contextlib

    def ctx(last):
        if not D.enabled or last:
            return contextlib.nullcontext()
        if hasattr(model, "no_sync"):
            return model.no_sync()
        if hasattr(model, "set_requires_gradient_sync"):
            @contextlib.contextmanager
            def fsdp():
                model.set_requires_gradient_sync(False)
                try:
                    yield
                finally:
                    model.set_requires_gradient_sync(True)
            return fsdp()
        return contextlib.nullcontext()
    return ctx
