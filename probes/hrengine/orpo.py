"""Issue 29: one ORPO step as TRL runs it: TRL's own ORPOTrainer.compute_loss (trl.experimental.orpo:
the chosen and rejected sequences concatenated into one forward, the chosen half's cross-entropy,
get_batch_logps over all the logits, the odds-ratio loss and the metrics) on the engine's model.
No reference model. The trainer is ORPOTrainer itself, made without its __init__ and given the
attributes its loss reads.

CPO and SimPO (`trainer: cpo`): TRL's CPOTrainer.compute_loss (trl.experimental.cpo), the same
layout and forward, the chosen half's cross-entropy only where cpo_alpha > 0 (SimPO: 0), the
log-probabilities averaged for ipo and simpo."""
from collections import defaultdict

from .trlshim import Accelerator, load_trl_module


def loss_fn(torch, model, ref_model, cfg, device, info):
    p = cfg["orpo"]
    common = dict(model=model, is_encoder_decoder=False, label_pad_token_id=-100,
                  accelerator=Accelerator(device), aux_loss_enabled=False, aux_loss_coef=0.0, beta=p["beta"],
                  _peft_has_been_casted_to_bf16=False, _stored_metrics=defaultdict(lambda: defaultdict(list)))
    if p.get("trainer", "orpo") == "cpo":
        Trainer = load_trl_module(info, "trl.experimental.cpo.cpo_trainer", "a CPO step (TRL's CPOTrainer)").CPOTrainer
        trainer = Trainer.__new__(Trainer)
        trainer.__dict__.update(common, pad_token_id=0, cpo_alpha=p["cpo_alpha"], loss_type=p["loss_type"],
                                label_smoothing=0.0, simpo_gamma=0.5, alpha=0.0)
        info["orpo"] = {"loss": "TRL CPOTrainer.compute_loss (trl.experimental.cpo)", "beta": p["beta"],
                        "cpo_alpha": p["cpo_alpha"], "loss_type": p["loss_type"], "prompt_len": p["prompt_len"]}
    else:
        Trainer = load_trl_module(info, "trl.experimental.orpo.orpo_trainer", "an ORPO step (TRL's ORPOTrainer)").ORPOTrainer
        trainer = Trainer.__new__(Trainer)
        trainer.__dict__.update(common, padding_value=0)
        info["orpo"] = {"loss": "TRL ORPOTrainer.compute_loss (trl.experimental.orpo)", "beta": p["beta"],
                        "prompt_len": p["prompt_len"]}
    trainer.__dict__["args"] = type("Args", (), {"device": device})()

    def loss(inputs):
        return trainer.compute_loss(model, inputs)

    return loss


def batches(torch, vocab, cfg, gen, device):
    """Per micro-batch: b pairs as ORPOTrainer's (and CPOTrainer's) collator lays them out: chosen and
    rejected ids (prompt then completion, seq_len each), their attention masks, and labels with the
    prompt's positions at -100."""
    b, s, ga = cfg["micro_batch"], cfg["seq_len"], cfg["grad_accum"]
    p = cfg["orpo"]["prompt_len"]
    out = []
    for _ in range(ga):
        inputs = {}
        for half in ("chosen", "rejected"):
            ids = torch.randint(0, vocab, (b, s), generator=gen)
            labels = ids.clone()
            labels[:, :p] = -100
            inputs[half + "_input_ids"] = ids.to(device)
            inputs[half + "_attention_mask"] = torch.ones((b, s), dtype=torch.long).to(device)
            inputs[half + "_labels"] = labels.to(device)
        out.append((inputs,))
    return out
