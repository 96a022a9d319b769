"""Issue 29: one DPO step as TRL runs it. The loss is TRL's own DPOTrainer._compute_loss (the
policy's forward over the chosen and rejected sequences concatenated, TRL's selective_log_softmax,
the reference forward under no_grad, the sigmoid loss and every metric it logs), called on the
engine's model with the few trainer attributes it reads; backward and the optimizer step are the
engine's, as for supervised fine-tuning. The reference is the policy with its adapter disabled
(PEFT, TRL's default), a frozen copy built like the policy (full fine-tuning), or none
(precomputed log-probabilities, read from the batch).

TRL is loaded as trlshim.py says."""
import types
from collections import defaultdict

from .trlshim import Accelerator, load_trl_module


def loss_fn(torch, model, ref_model, cfg, device, info):
    """A function (input_ids, completion_mask, ref_logps) -> loss running TRL's DPO loss."""
    DPOTrainer = load_trl_module(info, "trl.trainer.dpo_trainer", "a DPO step (TRL's DPOTrainer)").DPOTrainer
    dpo = cfg["dpo"]
    trainer = types.SimpleNamespace(
        model=model, ref_model=ref_model, accelerator=Accelerator(device),
        precompute_ref_logps=dpo["reference"] == "none", aux_loss_enabled=False, ld_alpha=None,
        f_divergence_type="reverse_kl", f_alpha_divergence_coef=1.0, loss_types=[dpo.get("loss_type", "sigmoid")],
        loss_weights=[1.0],
        beta=dpo["beta"], label_smoothing=0.0, use_weighting=False, router_aux_loss_coef=0.0,
        args=types.SimpleNamespace(gradient_checkpointing_kwargs={"use_reentrant": False},
                                   gradient_checkpointing=cfg["grad_checkpointing"]),
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)}, _total_train_tokens=0)
    compute = DPOTrainer._compute_loss
    info["dpo"] = {"loss": f"TRL DPOTrainer._compute_loss ({dpo.get('loss_type', 'sigmoid')})", "reference": dpo["reference"],
                   "beta": dpo["beta"], "prompt_len": dpo["prompt_len"]}

    def loss(ids, completion_mask, ref_logps=None):
        inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "completion_mask": completion_mask}
        if ref_logps is not None:
            inputs["ref_chosen_logps"], inputs["ref_rejected_logps"] = ref_logps
        return compute(trainer, model, inputs, False)

    return loss


def batches(torch, vocab, cfg, gen, device):
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
