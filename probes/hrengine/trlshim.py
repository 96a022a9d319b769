"""Issue 29: TRL's own loss functions, called on the engine's model. A post-training step here is
one TRL trainer's loss (DPOTrainer._compute_loss, KTOTrainer._compute_loss, ORPOTrainer's
compute_loss, RewardTrainer.compute_loss) with the few trainer attributes it reads, then the
engine's backward and optimizer step as for supervised fine-tuning (dpo.py, kto.py, orpo.py,
reward.py; posttrain.py names them).

TRL's trainer modules import `datasets` at their top for the dataset pipeline, which a step never
touches, and GRPO's imports `requests` and `urllib3` for its vLLM server client, which a step
with use_vllm=False never calls; where one is not installed a stand-in module answers those
imports."""
import importlib
import importlib.machinery
import sys
import types


# What each stand-in answers: the package and the submodules TRL imports names from.
STAND_INS = {
    "datasets": ("datasets", "datasets.fingerprint", "datasets.distributed", "datasets.utils"),
    "requests": ("requests", "requests.adapters"),
    "urllib3": ("urllib3", "urllib3.util", "urllib3.util.retry"),
}


def _stand_in(package):
    """Modules for `from <package> import X` whose names are inert classes: enough for TRL's
    imports and type hints, never for data or the network."""

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

    for name in STAND_INS[package]:
        sys.modules.setdefault(name, make(name))


def load_trl_module(info, module, what):
    """TRL's module `module`, or Missing (exit 4) naming TRL and what to install."""
    from .build import require
    require("trl", f"{what} (measured with TRL's own loss; pip install trl)")
    for package in STAND_INS:
        try:
            importlib.import_module(package)
        except ImportError:
            _stand_in(package)
            info[package] = "stand-in (not installed; the step reads no dataset and calls no server)"
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
