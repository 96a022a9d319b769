"""Issue 29: TRL's own loss functions, called on the engine's model. A post-training step here is
one TRL trainer's loss (DPOTrainer._compute_loss, KTOTrainer._compute_loss, ORPOTrainer's
compute_loss, RewardTrainer.compute_loss) with the few trainer attributes it reads, then the
engine's backward and optimizer step as for supervised fine-tuning (dpo.py, kto.py, orpo.py,
reward.py; posttrain.py names them).

TRL's trainer modules import `datasets` at their top for the dataset pipeline, which a step never
touches; where `datasets` is not installed a stand-in module answers those imports."""
import importlib
import importlib.machinery
import sys
import types


def _stand_in_datasets():
    """A module for `from datasets import X` and `from datasets.fingerprint import Hasher` whose
    names are inert classes: enough for TRL's imports and type hints, never for data."""

    def make(name):
        mod = types.ModuleType(name)
        mod.__spec__ = importlib.machinery.ModuleSpec(name, None)
        mod.__path__ = []  # a package, so its submodules import

        def __getattr__(attr):
            if attr.startswith("__"):
                raise AttributeError(attr)
            cls = type(attr, (), {})
            setattr(mod, attr, cls)
            return cls

        mod.__getattr__ = __getattr__
        return mod

    for name in ("datasets", "datasets.fingerprint", "datasets.distributed", "datasets.utils"):
        sys.modules.setdefault(name, make(name))


def load_trl_module(info, module, what):
    """TRL's module `module`, or Missing (exit 4) naming TRL and what to install."""
    from .build import require
    require("trl", f"{what} (measured with TRL's own loss; pip install trl)")
    try:
        import datasets  # noqa: F401
    except ImportError:
        _stand_in_datasets()
        info["datasets"] = "stand-in (not installed; the step reads no dataset)"
    import trl
    info["trl"] = getattr(trl, "__version__", "unknown")
    return require(module, what)


class Accelerator:
    """What TRL's losses ask of accelerate's Accelerator on one process."""

    def __init__(self, device):
        self.device = device

    def unwrap_model(self, model, *a, **k):
        return model

    def gather_for_metrics(self, t):
        return t

    def gather(self, t):
        return t
