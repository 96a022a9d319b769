"""Issue 29: one reward-model step as TRL runs it: the model is AutoModelForSequenceClassification
with one label (its `score` Linear in place of the lm_head; build.py), and the loss is TRL's own
RewardTrainer.compute_loss (b chosen then b rejected sequences in one forward, the pooled score
of each sequence's last token, -logsigmoid of the margin, and the metrics it logs)."""
import types
from collections import defaultdict

from .trlshim import Accelerator, load_trl_module


def loss_fn(torch, model, ref_model, cfg, device, info):
    RewardTrainer = load_trl_module(info, "trl.trainer.reward_trainer",
                                    "a reward-model step (TRL's RewardTrainer)").RewardTrainer
    trainer = types.SimpleNamespace(
        model=model, accelerator=Accelerator(device),
        args=types.SimpleNamespace(center_rewards_coefficient=None),
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)}, _total_train_tokens=0)
    compute = RewardTrainer.compute_loss
    info["reward"] = {"loss": "TRL RewardTrainer.compute_loss", "model_class": type(model).__name__}

    def loss(inputs):
        return compute(trainer, model, dict(inputs))

    return loss


def batches(torch, vocab, cfg, gen, device):
    """Per micro-batch: b pairs as TRL's reward collator lays them out: the b chosen sequences,
    then the b rejected ones, seq_len tokens each, with their attention mask."""
    b, s, ga = cfg["micro_batch"], cfg["seq_len"], cfg["grad_accum"]
    out = []
    for _ in range(ga):
        ids = torch.randint(0, vocab, (2 * b, s), generator=gen).to(device)
        out.append(({"input_ids": ids, "attention_mask": torch.ones_like(ids)},))
    return out
