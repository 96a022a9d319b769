"""Issue 29: one DPO step as TRL runs it. The loss is TRL's own DPOTrainer._compute_loss (the
policy's forward over the chosen and rejected sequences concatenated, TRL's selective_log_softmax,
the reference forward under no_grad, the sigmoid loss and every metric it logs), called on the
engine's model with the few trainer attributes it reads; backward and the optimizer step are the
engine's, as for supervised fine-tuning. The reference is the policy with its adapter disabled
(PEFT, TRL's default), a frozen copy built like the policy (full fine-tuning), or none
(precomputed log-probabilities, read from the batch).

TRL's dpo_trainer module imports `datasets` at its top for the dataset pipeline, which a step
never touches; where `datasets` is not installed a stand-in module answers those imports."""
import importlib.machinery
import sys
import types
from collections import defaultdict


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


def load_trl(info):
    """TRL's DPOTrainer, or Missing (exit 4) naming TRL and what to install."""
    from .build import require
    require("trl", "a DPO step (config.mode = dpo, measured with TRL's own loss; pip install trl)")
    try:
        import datasets  # noqa: F401
    except ImportError:
        _stand_in_datasets()
        info["datasets"] = "stand-in (not installed; the step reads no dataset)"
    import trl
    dpo = require("trl.trainer.dpo_trainer", "a DPO step (TRL's DPOTrainer)")
    info["trl"] = getattr(trl, "__version__", "unknown")
    return dpo.DPOTrainer


class _Accelerator:
    """What _compute_loss asks of accelerate's Accelerator on one process."""

    def __init__(self, device):
        self.device = device

    def unwrap_model(self, model, *a, **k):
        return model

    def gather_for_metrics(self, t):
        return t

    def gather(self, t):
        return t


def dpo_loss_fn(torch, DPOTrainer, model, ref_model, cfg, device, info):
    """A function (input_ids, attention_mask, completion_mask) -> loss running TRL's DPO loss."""
    dpo = cfg["dpo"]
    trainer = types.SimpleNamespace(
        model=model, ref_model=ref_model, accelerator=_Accelerator(device),
        precompute_ref_logps=dpo["reference"] == "none", aux_loss_enabled=False, ld_alpha=None,
        f_divergence_type="reverse_kl", f_alpha_divergence_coef=1.0, loss_types=["sigmoid"], loss_weights=[1.0],
        beta=dpo["beta"], label_smoothing=0.0, use_weighting=False, router_aux_loss_coef=0.0,
        args=types.SimpleNamespace(gradient_checkpointing_kwargs={"use_reentrant": False},
                                   gradient_checkpointing=cfg["grad_checkpointing"]),
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)}, _total_train_tokens=0)
    compute = DPOTrainer._compute_loss
    info["dpo"] = {"loss": "TRL DPOTrainer._compute_loss (sigmoid)", "reference": dpo["reference"],
                   "beta": dpo["beta"], "prompt_len": dpo["prompt_len"]}

    def loss(ids, completion_mask, ref_logps=None):
        inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "completion_mask": completion_mask}
        if ref_logps is not None:
            inputs["ref_chosen_logps"], inputs["ref_rejected_logps"] = ref_logps
        return compute(trainer, model, inputs, False)

    return loss


def dpo_batches(torch, vocab, cfg, gen, device):
    """Per micro-batch: b pairs as TRL's collator lays them out (the b chosen sequences, then the b
    rejected ones, each prompt then completion, padded to seq_len) and the completion mask."""
    b, s, ga = cfg["micro_batch"], cfg["seq_len"], cfg["grad_accum"]
    p = cfg["dpo"]["prompt_len"]
    out = []
    for _ in range(ga):
        ids = torch.randint(0, vocab, (2 * b, s), generator=gen).to(device)
        mask = torch.zeros((2 * b, s), dtype=torch.long)
        mask[:, p:] = 1
        ref = None
        if cfg["dpo"]["reference"] == "none":  # precomputed: one number per sequence
            ref = (torch.zeros(b, device=device), torch.zeros(b, device=device))
        out.append((ids, mask.to(device), ref))
    return out
