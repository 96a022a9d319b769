"""Issue 29: one KTO step as TRL runs it: TRL's own KTOTrainer._compute_loss (the KL batch's
forward under no_grad, the policy's forward over the b unpaired sequences, TRL's
selective_log_softmax, the reference's forwards under no_grad, the KTO loss and every metric it
logs) on the engine's model. The reference is the policy with its adapter disabled, a frozen copy,
or none (precomputed log-probabilities, read from the batch)."""
import types
from collections import defaultdict

from .trlshim import Accelerator, load_trl_module


def loss_fn(torch, model, ref_model, cfg, device, info):
    KTOTrainer = load_trl_module(info, "trl.trainer.kto_trainer", "a KTO step (TRL's KTOTrainer)").KTOTrainer
    p = cfg["kto"]
    trainer = types.SimpleNamespace(
        model=model, ref_model=ref_model, accelerator=Accelerator(device), calculate_KL=True,
        use_liger_kernel=False, _is_vlm=False, aux_loss_enabled=False, router_aux_loss_coef=0.0,
        precompute_ref_logps=p["reference"] == "none", loss_type="kto", beta=p["beta"],
        desirable_weight=1.0, undesirable_weight=1.0,
        args=types.SimpleNamespace(gradient_checkpointing_kwargs={"use_reentrant": False},
                                   gradient_checkpointing=cfg["grad_checkpointing"]),
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)}, _total_train_tokens=0)
    trainer._compute_kl_logps = types.MethodType(KTOTrainer._compute_kl_logps, trainer)
    compute = KTOTrainer._compute_loss
    info["kto"] = {"loss": "TRL KTOTrainer._compute_loss (kto, with the KL batch)", "reference": p["reference"],
                   "beta": p["beta"], "prompt_len": p["prompt_len"]}

    def loss(inputs):
        return compute(trainer, model, inputs, False)

    return loss


def batches(torch, vocab, cfg, gen, device):
    """Per micro-batch: b unpaired sequences (prompt then completion, padded to seq_len), the first
    half desirable, and the KL batch TRL's collator adds (each prompt with another's completion)."""
    b, s, ga = cfg["micro_batch"], cfg["seq_len"], cfg["grad_accum"]
    p = cfg["kto"]["prompt_len"]
    out = []
    for _ in range(ga):
        mask = torch.zeros((b, s), dtype=torch.long)
        mask[:, p:] = 1
        inputs = {"input_ids": torch.randint(0, vocab, (b, s), generator=gen).to(device),
                  "attention_mask": torch.ones((b, s), dtype=torch.long).to(device),
                  "completion_mask": mask.to(device),
                  "KL_input_ids": torch.randint(0, vocab, (b, s), generator=gen).to(device),
                  "KL_attention_mask": torch.ones((b, s), dtype=torch.long).to(device),
                  "KL_completion_mask": mask.clone().to(device),
                  "label": torch.tensor([i < (b + 1) // 2 for i in range(b)], dtype=torch.bool).to(device)}
        if cfg["kto"]["reference"] == "none":  # precomputed: one number per sequence
            inputs["ref_logps"] = torch.zeros(b, device=device)
            inputs["ref_KL_logps"] = torch.zeros(b, device=device)
        out.append((inputs,))
    return out
