"""Issue 29: one ORPO step as TRL runs it: TRL's own ORPOTrainer.compute_loss (trl.experimental.orpo:
the chosen and rejected sequences concatenated into one forward, the chosen half's cross-entropy,
get_batch_logps over all the logits, the odds-ratio loss and the metrics) on the engine's model.
No reference model. The trainer is ORPOTrainer itself, made without its __init__ and given the
attributes its loss reads."""
from collections import defaultdict

from .trlshim import Accelerator, load_trl_module


def loss_fn(torch, model, ref_model, cfg, device, info):
    ORPOTrainer = load_trl_module(info, "trl.experimental.orpo.orpo_trainer",
                                  "an ORPO step (TRL's ORPOTrainer)").ORPOTrainer
    p = cfg["orpo"]
    trainer = ORPOTrainer.__new__(ORPOTrainer)
    trainer.__dict__.update(
        model=model, is_encoder_decoder=False, padding_value=0, label_pad_token_id=-100,
        accelerator=Accelerator(device), aux_loss_enabled=False, aux_loss_coef=0.0, beta=p["beta"],
        _peft_has_been_casted_to_bf16=False, _stored_metrics=defaultdict(lambda: defaultdict(list)))
    trainer.__dict__["args"] = type("Args", (), {"device": device})()
    info["orpo"] = {"loss": "TRL ORPOTrainer.compute_loss (trl.experimental.orpo)", "beta": p["beta"],
                    "prompt_len": p["prompt_len"]}

    def loss(inputs):
        return trainer.compute_loss(model, inputs)

    return loss


def batches(torch, vocab, cfg, gen, device):
    """Per micro-batch: b pairs as ORPOTrainer's collator lays them out: chosen and rejected ids
    (prompt then completion, seq_len each), their attention masks, and labels with the prompt's
    positions at -100."""
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
