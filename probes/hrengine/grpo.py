"""Issue 29: one GRPO step as TRL runs it with use_vllm=False (trl/trainer/grpo_trainer.py at
f2cd577), in three timed phases before the micro-batches:

- generation: GRPOTrainer._generate_single_turn's regular path. The model generates under
  TRL's own unwrap_model_for_generation (which turns gradient checkpointing off for the call and
  back on after it) and torch.no_grad(), with the GenerationConfig TRL builds (do_sample,
  max_new_tokens = the completion's length, temperature, top_p 1, top_k 0, disable_compile).
  The engine's model is random, so no end-of-sequence token is set: every completion runs to
  max_completion_length, the longest (worst) case a run can meet;
- reference (beta > 0): TRL's no_grad pass over prompt + completion through the reference (the
  adapter disabled by TRL's use_adapter, or the frozen copy), per_device_train_batch_size
  sequences at a time, with TRL's own _get_per_token_logps_and_entropies;
- then each micro-batch's forward is TRL's own GRPOTrainer._compute_loss (the policy's
  log-probabilities and entropies over the completion, the clipped loss; loss_type as set,
  TRL's default dapo), backward and the optimizer step as for supervised fine-tuning.

The generation batch is micro_batch x grad_accum completions (TRL's default steps_per_generation
= gradient_accumulation_steps: one generation per optimizer step), num_generations of them per
prompt. Rewards are a function of the completions' text in TRL: no device memory; the engine's
advantages are random numbers of the same shape."""
import types
from collections import defaultdict

from .trlshim import Accelerator, load_trl_module

# The GRPOConfig defaults TRL f2cd577 ships, as the engine runs them.
DEFAULTS = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "epsilon": 0.2, "loss_type": "dapo"}


class GrpoAccelerator(Accelerator):
    """What GRPOTrainer's generation and loss ask of accelerate's Accelerator on one process."""

    num_processes = 1
    is_main_process = True  # TRL's profiling_decorator asks
    state = types.SimpleNamespace(deepspeed_plugin=None, fsdp_plugin=None)

    def reduce(self, t, reduction="sum"):
        return t


def loss_fn(torch, model, ref_model, cfg, device, info):
    mod = load_trl_module(info, "trl.trainer.grpo_trainer", "a GRPO step (TRL's GRPOTrainer)")
    GRPOTrainer = mod.GRPOTrainer
    p = cfg["grpo"]
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    import inspect
    trainer = types.SimpleNamespace(
        model=model, ref_model=ref_model, accelerator=GrpoAccelerator(device), temperature=p["temperature"],
        model_kwarg_keys=inspect.signature(base.forward).parameters.keys(), _entropy_bonus_enabled=False,
        aux_loss_enabled=False, top_entropy_quantile=1.0, off_policy_mask_threshold=None,
        importance_sampling_level="token", beta=p["beta"], loss_type=DEFAULTS["loss_type"],
        epsilon_low=DEFAULTS["epsilon"], epsilon_high=DEFAULTS["epsilon"], use_vllm=False,
        vllm_importance_sampling_correction=False, current_gradient_accumulation_steps=cfg["grad_accum"],
        args=types.SimpleNamespace(use_bias_correction_kl=False, delta=None,
                                   gradient_checkpointing_kwargs={"use_reentrant": False},
                                   per_device_train_batch_size=cfg["micro_batch"]),
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)})
    trainer._get_per_token_logps_and_entropies = types.MethodType(
        GRPOTrainer._get_per_token_logps_and_entropies, trainer)
    compute = GRPOTrainer._compute_loss
    info["grpo"] = {"loss": f"TRL GRPOTrainer._compute_loss ({DEFAULTS['loss_type']})", "beta": p["beta"],
                    "reference": p["reference"], "prompt_len": p["prompt_len"],
                    "completion_len": cfg["seq_len"] - p["prompt_len"], "num_generations": p["num_generations"],
                    "generation": "GenerationMixin.generate under TRL's unwrap_model_for_generation, no_grad"}

    def loss(inputs):
        return compute(trainer, model, inputs)

    loss.trainer = trainer
    return loss


def batches(torch, vocab, cfg, gen, device):
    """The generation batch's prompts: micro_batch x grad_accum of prompt_len tokens (equal
    lengths: no padding), made on the host and moved as TRL's collator leaves them."""
    b, ga = cfg["micro_batch"], cfg["grad_accum"]
    p = cfg["grpo"]["prompt_len"]
    ids = torch.randint(0, vocab, (b * ga, p), generator=gen)
    return [(ids.to(device), torch.ones_like(ids).to(device))]


def rollout(torch, model, ref_model, cfg, device, prompts, loss, phase):
    """The step's generation and reference phases (`phase(name, fn)` times one): the micro-batch
    inputs TRL's _prepare_inputs hands _compute_loss, one dict per micro-batch."""
    from trl.models.utils import unwrap_model_for_generation
    from trl.models.utils import disable_gradient_checkpointing
    from trl.trainer.utils import use_adapter
    from transformers import GenerationConfig
    trainer = loss.trainer
    p = cfg["grpo"]
    b, ga, s = cfg["micro_batch"], cfg["grad_accum"], cfg["seq_len"]
    prompt_ids, prompt_mask = prompts[0]
    completion_len = s - p["prompt_len"]
    kwargs = {"max_new_tokens": completion_len, "do_sample": True, "pad_token_id": 0, "bos_token_id": None,
              "eos_token_id": None, "temperature": p["temperature"], "top_p": DEFAULTS["top_p"],
              "top_k": DEFAULTS["top_k"], "min_p": None, "repetition_penalty": 1.0, "cache_implementation": None}

    def generate():
        config = GenerationConfig(**kwargs, disable_compile=True)
        with unwrap_model_for_generation(model, trainer.accelerator, generation_kwargs=kwargs) as unwrapped, \
                torch.no_grad():
            out = unwrapped.generate(input_ids=prompt_ids, attention_mask=prompt_mask, generation_config=config)
        completion_ids = out[:, prompt_ids.size(1):]
        # TRL: the completion mask up to the first end-of-sequence token (none here: all ones)
        completion_mask = torch.ones_like(completion_ids, dtype=torch.long)
        return completion_ids.contiguous(), completion_mask

    completion_ids, completion_mask = phase("generation", generate)

    def reference():
        ids = torch.cat([prompt_ids, completion_ids], dim=1)
        mask = torch.cat([prompt_mask, completion_mask], dim=1)
        with torch.no_grad(), disable_gradient_checkpointing(model, {"use_reentrant": False}):
            if ref_model is not None:
                logps, _, _ = trainer._get_per_token_logps_and_entropies(ref_model, ids, mask, completion_len, b)
            else:
                with use_adapter(model, adapter_name=None):
                    logps, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, mask, completion_len, b)
        return logps

    ref_logps = phase("reference", reference) if p["beta"] != 0.0 else None
    num_items = completion_mask.sum()
    advantages = torch.randn(b * ga, device=device)
    out = []
    for m in range(ga):
        rows = slice(m * b, (m + 1) * b)
        inputs = {"prompt_ids": prompt_ids[rows], "prompt_mask": prompt_mask[rows],
                  "completion_ids": completion_ids[rows], "completion_mask": completion_mask[rows],
                  "advantages": advantages[rows], "num_items_in_batch": num_items}
        if ref_logps is not None:
            inputs["ref_per_token_logps"] = ref_logps[rows]
        out.append((inputs,))
    return out
