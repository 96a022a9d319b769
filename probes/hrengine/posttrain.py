"""Issue 29: the post-training modes the engine measures, each one file (trlshim.py says how TRL's
own losses run here): the mode's loss over its batch layout, and whether it has a reference."""
from . import dpo, grpo, kto, orpo, reward

# mode: (module, has a reference model: adapter / copy / none)
MODES = {"dpo": (dpo, True), "kto": (kto, True), "orpo": (orpo, False), "reward": (reward, False),
         "grpo": (grpo, True)}


def reference_of(cfg):
    """The mode's reference: adapter, copy or none (ORPO and reward modelling have none; GRPO has
    one only with beta > 0, and says none otherwise)."""
    mod = MODES.get(cfg["mode"])
    if mod is None or not mod[1]:
        return "none"
    return cfg[cfg["mode"]]["reference"]


def rollout_of(cfg):
    """The mode's phases before its micro-batches (GRPO's generation and reference), or None."""
    mod = MODES.get(cfg["mode"])
    return getattr(mod[0], "rollout", None) if mod else None


def setup(torch, model, ref_model, cfg, device, info):
    """(loss function, batch maker) of the request's mode, or (None, None) for supervised steps."""
    mod = MODES.get(cfg["mode"])
    if mod is None:
        return None, None
    loss = mod[0].loss_fn(torch, model, ref_model, cfg, device, info)
    return loss, mod[0].batches
