"""The optimizer the request names, as torch.optim or bitsandbytes builds it, and its state's
storages."""

from .build import require
from .protocol import BadRequest, short


def build_optimizer(torch, cfg, params, info, zero1=False):
    opt, impl = cfg["optimizer"], cfg["optimizer_impl"]
    lr = 1e-5
    if opt in ("adamw", "sgd", "sgd-momentum"):
        cls = torch.optim.AdamW if opt == "adamw" else torch.optim.SGD
        kw = {"lr": lr}
        if opt == "sgd-momentum":
            kw["momentum"] = 0.9
        if impl == "fused":
            kw["fused"] = True
        else:
            kw["foreach"] = impl == "foreach"
    elif opt == "adafactor":
        # What HF Trainer builds for optim="adafactor": transformers.optimization.Adafactor with
        # scale_parameter=False, relative_step=False and the learning rate; beta1 stays None.
        transformers = require("transformers", "Adafactor")
        cls = transformers.optimization.Adafactor
        kw = {"lr": lr, "scale_parameter": False, "relative_step": False}
    elif opt in ("adamw-8bit", "paged-adamw-8bit", "lion"):
        bnb = require("bitsandbytes", f"--optimizer {opt}")
        info["bitsandbytes"] = getattr(bnb, "__version__", "?")
        cls = {"adamw-8bit": bnb.optim.AdamW8bit, "paged-adamw-8bit": bnb.optim.PagedAdamW8bit,
               "lion": bnb.optim.Lion}[opt]
        kw = {"lr": lr}
    else:
        raise BadRequest("config.optimizer", opt, "not available in the transformers engine")
    info["optimizer_class"] = f"{cls.__module__}.{cls.__name__}"
    try:
        if zero1:
            from torch.distributed.optim import ZeroRedundancyOptimizer
            return ZeroRedundancyOptimizer(params, optimizer_class=cls, **kw)
        return cls(params, **kw)
    except (TypeError, RuntimeError, ValueError) as e:
        if impl == "fused":
            raise BadRequest("config.optimizer_impl", impl, f"{cls.__name__} refused it here ({short(str(e), 120)})")
        raise


def state_tensors(opt):
    inner = getattr(opt, "optim", opt)  # ZeroRedundancyOptimizer keeps the local optimizer in .optim
    for st in inner.state.values():
        for v in st.values():
            if hasattr(v, "data_ptr") and hasattr(v, "is_cuda"):
                yield v


def untyped_storage(t):
    """The tensor's storage as an UntypedStorage (what allocations are made of)."""
    try:
        return t.untyped_storage()
    except AttributeError:  # torch 1.13
        return t._storage()


def storage_key(t):
    return untyped_storage(t).data_ptr()


def storage_bytes(t):
    return untyped_storage(t).nbytes()
