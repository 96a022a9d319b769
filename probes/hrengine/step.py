"""The measured run: warm-up, the measured steps phase by phase, progress, and the result."""
import datetime
import gc
import os
import sys
import time

from .attribution import attribute, finalize, rank_peak
from .build import build_model, find_layers, lap, model_info
from .meters import cpu_name, is_oom, oom_requested_bytes, vm_bytes
from .optimizers import build_optimizer, storage_bytes
from .posttrain import reference_of, rollout_of, setup as posttrain_setup
from .parallel import _Null, gradient_sync_control, parameters_sum, wrap_parallel
from .protocol import BadRequest, EXIT_OK, EXIT_OUT_OF_MEMORY, Missing, SCHEMA_VERSION, Stopped, VERSION, _stop, check_stop, short, write_atomically
from .trace import Recorder, finish_trace
from .vision import setup as vision_setup
from .worker import run_info


def measure(args, R, out, factory, t_start, torch, cfg, D, cuda, device, meter):
    info = {"engine_version": VERSION, "python": sys.version.split()[0], "torch": torch.__version__, **run_info()}
    t_init = time.time() - t_start
    D.init(cuda)
    if args.memory_cap_bytes and cuda:
        total = torch.cuda.get_device_properties(device).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, args.memory_cap_bytes / total), device)
        info["memory_cap_bytes"] = args.memory_cap_bytes

    recorder = Recorder(torch) if cuda and (args.timeline or args.snapshot) else None
    if recorder:
        recorder.start()
    M = {
        "schema_version": SCHEMA_VERSION, "event": "result", "engine": "transformers",
        "device": "cuda" if cuda else "cpu",
        "device_name": torch.cuda.get_device_name(device) if cuda else cpu_name(),
        "driver": meter.driver() if cuda else "", "torch_version": torch.__version__,
        "headroom_version": VERSION, "created_at": datetime.datetime.now(datetime.timezone.utc)
        .strftime("%Y-%m-%dT%H:%M:%SZ"), "model": R["model"], "config": cfg, "warmup_steps": 1,
        "phases": [], "note": "", "oom": None, "shared_device": bool(D.enabled and D.share),
    }
    if not cuda:
        M["note"] = ("CPU mode: bytes from the profiler's record of CPU allocations; on CUDA add the cuBLAS "
                     "workspace, the caching allocator's slack and the CUDA context.")
    state = {"step": 0, "phase": "after_load", "micro": 0}
    marks = []  # CPU: (label, t_begin, t_end)

    def record_phase(step, phase, micro, seconds, before_mark=None, end_mark=None):
        pm = {"step": step, "phase": phase, "micro_batch": micro, "seconds": round(seconds, 6)}
        if cuda:
            st = meter.read()
            used, total = meter.device_used_total()
            pm.update({"peak_allocated_bytes": st["allocated_peak"], "peak_reserved_bytes": st["reserved_peak"],
                       "allocated_bytes": st["allocated"], "reserved_bytes": st["reserved"],
                       "device_used_bytes": used, "device_total_bytes": total,
                       "process_used_bytes": meter.process_used(),
                       "alloc_retries": st["retries"], "ooms": st["ooms"]})
        else:
            marks.append((pm, before_mark, end_mark))
        M["phases"].append(pm)
        return pm

    model = opt = None
    A = None
    weights = 0
    t_build = t_steps = 0.0
    last_step = R["steps"]  # steps are 0 (warm-up) .. R["steps"]
    grad_ptrs = set()
    try:
        t0 = time.time()
        # FSDP2 as a Trainer's model reaches it through accelerate: built on the CPU (Trainer
        # leaves an FSDP model where it is), then each fully_shard moves its unit's parameters
        # and buffers to the GPU and shards them (_move_states_to_device, then
        # _init_sharded_param): the GPU never holds the whole model. QLoRA quantizes on the GPU.
        build_device = device
        if cuda and D.enabled and D.zero >= 2 and D.sharding == "fsdp" and cfg["finetune"] != "qlora":
            build_device = "cpu"
            info["fsdp_build"] = "cpu, moved per unit by fully_shard"
        model = build_model(torch, R, build_device, factory, info)
        model, _ = wrap_parallel(torch, model, R, D, cuda, info)
        # Issue 29: a post-training mode's loss (TRL's own) and its reference, built with the
        # policy as TRL's trainer does in its __init__
        ref_model = None
        if reference_of(cfg) == "copy":
            if cfg["finetune"] != "full":
                raise BadRequest(f"config.{cfg['mode']}.reference", "copy",
                                 "a reference copy is measured with full fine-tuning")
            ref_model = build_model(torch, R, build_device, factory, {})
            ref_model.eval()
            for p in ref_model.parameters():
                p.requires_grad_(False)
        post_loss, post_batches = posttrain_setup(torch, model, ref_model, cfg, device, info)
        if cfg.get("vision") is not None:  # issue 30: images and videos in the batch (vision.py)
            post_loss, post_batches = vision_setup(torch, model, R, cfg, device, info)
        params = [p for p in model.parameters() if p.requires_grad]
        if not params:
            raise BadRequest("config.finetune", cfg["finetune"], "leaves no trainable parameter")
        t1 = time.perf_counter()
        opt = build_optimizer(torch, cfg, params, info, zero1=D.enabled and D.zero == 1 and D.sharding != "deepspeed")
        lap(info, "optimizer_build", t1)
        scaler = None
        if cfg["precision"] == "amp-fp16" and cuda:
            scaler = torch.amp.GradScaler("cuda") if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler") \
                else torch.cuda.amp.GradScaler()
        mcfg = getattr(model, "config", None)
        text_cfg = mcfg.get_text_config() if hasattr(mcfg, "get_text_config") else mcfg
        vocab = int(R["hf_config"].get("vocab_size") or getattr(mcfg, "vocab_size", 0) or
                    getattr(text_cfg, "vocab_size", 0) or 0)
        if vocab <= 0:
            raise BadRequest("model.config.vocab_size", "(missing)", "needed for the random batch")
        b, s, ga = cfg["micro_batch"], cfg["seq_len"], cfg["grad_accum"]
        gen = torch.Generator(device="cpu")
        gen.manual_seed(1 + D.rank)  # each rank reads its own batch
        rollout = rollout_of(cfg)
        prompts = batches = post_batches(torch, vocab, cfg, gen, device) if post_loss else \
            [torch.randint(0, vocab, (b, s), generator=gen).to(device) for _ in range(ga)]
        meter.sync()
        info.update(model_info(torch, model, opt))
        layers0 = find_layers(model)
        info["layer_class"] = type(layers0[0]).__name__ if layers0 else None
        info["layers"] = len(layers0)
        weights = sum(storage_bytes(p.to_local() if hasattr(p, "to_local") else p) for p in model.parameters())
        t_build = time.time() - t0
        after = {"step": 0, "phase": "after_load", "micro_batch": 0, "seconds": 0.0}
        if cuda:
            st = meter.read()
            used, total = meter.device_used_total()
            after.update({"peak_allocated_bytes": st["allocated"], "peak_reserved_bytes": st["reserved"],
                          "allocated_bytes": st["allocated"], "reserved_bytes": st["reserved"],
                          "device_used_bytes": used, "device_total_bytes": total,
                          "process_used_bytes": meter.process_used(), "alloc_retries": 0, "ooms": 0})
            if recorder:
                recorder.mark({"step": 0, "phase": "after_load", "micro_batch": 0}, st["allocated"])
        else:
            marks.append((after, None, meter.mark()))
        M["phases"].append(after)
        if args.memory_cap_bytes and not cuda:
            import resource
            resource.setrlimit(resource.RLIMIT_AS, (vm_bytes() + args.memory_cap_bytes, resource.RLIM_INFINITY))
            info["memory_cap_bytes"] = args.memory_cap_bytes

        amp_dtype = {"amp-bf16": torch.bfloat16, "amp-fp16": torch.float16}.get(cfg["precision"])
        layers = find_layers(model)
        progress = Progress(out, len(layers), 1 + R["steps"], ga)
        hooks = install_progress_hooks(layers, progress)
        sync_ctx = gradient_sync_control(model, D)

        # Activation offload as PyTorch ships it: every tensor autograd saves in the forward is
        # copied to pinned host memory and brought back when backward unpacks it.
        offload = cfg["activation_offload"]
        if offload:
            info["activation_offload"] = "torch.autograd.graph.save_on_cpu(pin_memory=True)"

        def forward(ids):
            ctx = torch.autocast(device.type, dtype=amp_dtype) if amp_dtype is not None else _Null()
            hooks_ctx = torch.autograd.graph.save_on_cpu(pin_memory=cuda) if offload else _Null()
            with hooks_ctx, ctx:
                loss = post_loss(*ids) if post_loss else model(input_ids=ids, labels=ids).loss
            return loss / ga if ga > 1 else loss

        def backward(loss):
            (scaler.scale(loss) if scaler else loss).backward()

        def optimizer_step():
            if scaler:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()

        t_steps0 = time.time()
        for k in range(1 + R["steps"]):
            t1 = time.perf_counter()
            if rollout:  # issue 29: GRPO generates the step's completions first (grpo.py)
                state.update(step=k, phase="generation", micro=0)

                def phase(name, fn, k=k):
                    state["phase"] = name
                    return timed_phase(meter, progress, recorder, record_phase, k, name, 0, fn)

                batches = rollout(torch, model, ref_model, cfg, device, prompts, post_loss, phase)
            for m in range(ga):
                with sync_ctx(m == ga - 1):
                    state.update(step=k, phase="forward", micro=m)
                    loss = timed_phase(meter, progress, recorder, record_phase, k, "forward", m,
                                       lambda: forward(batches[m]))
                    state["phase"] = "backward"
                    timed_phase(meter, progress, recorder, record_phase, k, "backward", m, lambda l=loss: backward(l))
                    del loss
            state.update(phase="optimizer", micro=0)
            if recorder and k == last_step:
                grad_ptrs = {(p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad).data_ptr()
                             for p in model.parameters() if p.grad is not None}
            timed_phase(meter, progress, recorder, record_phase, k, "optimizer", 0, optimizer_step)
            opt.zero_grad(set_to_none=True)
            lap(info, f"step{k}", t1)
        t_steps = time.time() - t_steps0
        if recorder:
            t1 = time.perf_counter()
            meter.sync()
            recorder.mark({"step": last_step, "phase": "end", "micro_batch": 0}, meter.allocated_now())
            finish_trace(args, recorder.stop(), recorder.marks, model, opt, grad_ptrs, R, last_step, cfg)
            recorder = None
            lap(info, "timeline", t1)
        for h in hooks:
            h.remove()
        if not args.no_attribution and not post_loss:
            t1 = time.perf_counter()
            A = attribute(torch, model, opt, meter, vocab, forward, backward, optimizer_step, ga, batches, sync_ctx, D)
            lap(info, "attribution", t1)
        progress.done()
    except (Stopped, BadRequest, Missing):
        raise
    except BaseException as e:
        if _stop.is_set():
            raise Stopped()
        if not is_oom(torch, e):
            raise
        e.__traceback__ = None
        msg = str(e).split("\n")[0]
        M["oom"] = {"step": state["step"], "phase": state["phase"], "requested_bytes": oom_requested_bytes(str(e)),
                    "in_use_bytes": 0, "message": short(msg, 500)}
        if cuda:
            st = meter.read()
            M["oom"]["in_use_bytes"] = int(st["allocated_peak"])
            M["oom_reserved"] = int(st["reserved_peak"])
        del e
        model = opt = A = None
        gc.collect()
        if t_steps == 0.0:
            t_steps = time.time() - t_start - t_init - t_build
    if not cuda:
        meter.finish()
        resolve_cpu_phases(meter, marks)
        if M["oom"] is not None:
            M["oom"]["in_use_bytes"] = max([p.get("peak_allocated_bytes", 0) for p in M["phases"]] + [0])
    finalize(M, A, cuda, weights)
    M["timing"] = {"wall_s": round(time.time() - t_start, 4), "init_s": round(t_init, 4),
                   "build_s": round(t_build, 4), "steps_s": round(t_steps, 4)}
    M["engine_info"] = info
    if D.enabled:
        M["backend"] = D.backend
        M["ranks"] = [rank_peak(M, D.rank, parameters_sum(torch, model, D) if model is not None else 0.0)]
    D.close()
    code = EXIT_OUT_OF_MEMORY if M["oom"] else EXIT_OK
    if args.rank_dir:
        write_atomically(os.path.join(args.rank_dir, f"rank{D.rank}.json"), M)
    if not D.enabled:
        out.emit(M)
        if args.out:
            try:
                write_atomically(args.out, M)
            except OSError as e:
                raise BadRequest("--out", args.out, f"cannot write the file ({e.strerror})")
    if M["oom"]:
        print(f"headroom-engine: out of memory in {M['oom']['phase']} of step {M['oom']['step']}", file=sys.stderr)
    return code


class Progress:
    """Progress events: before each phase, and after each decoder layer in forward and backward."""

    def __init__(self, out, layers, steps, ga):
        self.out, self.layers, self.steps, self.ga = out, max(1, layers), steps, ga
        self.per_step = 2 * ga + 1
        self.cur = (0, "forward", 0)
        self.last = 0.0

    def phase(self, step, phase, micro):
        self.cur = (step, phase, micro)
        self.emit(None)

    def layer(self, i):
        now = time.time()
        if now - self.last < 0.25:  # at most four layer events a second
            return
        self.emit(i)

    def emit(self, layer):
        step, phase, micro = self.cur
        idx = {"generation": 0, "reference": 0, "forward": 2 * micro, "backward": 2 * micro + 1,
               "optimizer": 2 * self.ga}[phase]
        frac = (step * self.per_step + idx) / (self.steps * self.per_step)
        ev = {"event": "progress", "step": step, "phase": phase, "fraction": round(min(frac, 1.0), 4)}
        if self.ga > 1:
            ev["micro_batch"] = micro
        if layer is not None:
            ev["layer"] = layer
            ev["layers"] = self.layers
        self.last = time.time()
        self.out.emit(ev)

    def done(self):
        self.out.emit({"event": "progress", "step": self.steps - 1, "phase": "optimizer", "fraction": 1.0})


def install_progress_hooks(layers, progress):
    """Per decoder layer: a stop check and a progress event in forward, and the same in backward
    through a hook on the layer's output gradient (hooks that allocate nothing)."""
    handles = []
    n = len(layers)

    for i, layer in enumerate(layers):
        def fwd(_m, _inp, output, i=i):
            check_stop()
            if progress.cur[1] == "forward":
                progress.layer(i)
            t = output[0] if isinstance(output, tuple) else output
            if getattr(t, "requires_grad", False) and getattr(t, "grad_fn", None) is not None:
                def on_grad(_g, i=i):
                    check_stop()
                    if progress.cur[1] == "backward":
                        progress.layer(n - 1 - i)
                t.register_hook(on_grad)
        handles.append(layer.register_forward_hook(fwd))
    return handles


def timed_phase(meter, progress, recorder, record_phase, step, phase, micro, fn):
    check_stop()
    progress.phase(step, phase, micro)
    meter.sync()
    if meter.cuda:
        meter.reset_peak()
        if recorder:
            recorder.mark({"step": step, "phase": phase, "micro_batch": micro}, meter.allocated_now())
    t_begin = meter.mark()
    t0 = time.perf_counter()
    r = fn()
    meter.sync()
    record_phase(step, phase, micro, time.perf_counter() - t0, t_begin, meter.mark())
    return r


def resolve_cpu_phases(meter, marks):
    for pm, t0, t1 in marks:
        if t0 is None:  # after_load: the allocated total at that moment
            v = meter.at(t1)
            start = peak = end = v
        else:
            start, peak, end = meter.window(t0, t1)
        pm.update({"peak_allocated_bytes": peak, "peak_reserved_bytes": peak, "allocated_bytes": end,
                   "reserved_bytes": end, "device_used_bytes": 0, "device_total_bytes": 0, "process_used_bytes": 0,
                   "alloc_retries": 0, "ooms": 0})
