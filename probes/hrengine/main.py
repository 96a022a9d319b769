"""headroom_engine: the `transformers` engine of headroom-probe.

It runs the training stack users run -- PyTorch, Hugging Face Transformers and PEFT (and
bitsandbytes, FSDP2 or DeepSpeed where asked and installed) -- for one request, and reports
per-phase memory in headroom-probe's protocol (docs/probe-protocol.md; the JSON Schema is
resources/probe-protocol.schema.json): JSON lines on stdout, progress events, then one result.

    python3 headroom_engine.py --request FILE [--out FILE] [--steps N] [--device auto|cuda|cpu]
        [--snapshot FILE] [--timeline FILE] [--memory-cap-bytes N] [--model-factory FILE]
        [--rank-dir DIR] [--share-gpu] [--sharding fsdp|deepspeed]

headroom-probe --engine transformers starts it (with HEADROOM_PYTHON or Settings' interpreter),
and starts it under torchrun for several ranks. Exit codes are the probe's: 0 ok, 2 bad
request, 3 out of memory (a result is still printed), 4 a device or package is missing,
5 internal error, 128 + signal when stopped.

A training step here is HF Trainer's: for each micro-batch `loss = model(input_ids=ids,
labels=ids).loss / grad_accum; loss.backward()` (the output object, and so its logits, dropped
before backward), then `optimizer.step(); optimizer.zero_grad(set_to_none=True)`. One warm-up
step runs first (optimizer state appears at the first step()), then the measured steps, each
phase with the allocator's peak reset. Attribution comes from one extra, instrumented step, so
the measured steps run untouched.
"""
import argparse
import os
import signal
import sys
import time

from .build import load_factory
from .meters import CpuMeter, CudaMeter
from .parallel import Dist, torchrun
from .protocol import BadRequest, EXIT_BAD_REQUEST, EXIT_INTERNAL, EXIT_NO_DEVICE, EXIT_OK, Missing, Output, Stopped, _on_signal, _signal, _stop, short, write_atomically
from .request import parse_request, read_request
from .step import measure
from .trace import convert_snapshot
from .worker import preload


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    worker = os.environ.get("HEADROOM_ENGINE_WORKER")
    if worker and "RANK" not in os.environ and not any(a.split("=")[0] in ("--serve", "--torchrun", "--convert-snapshot")
                                                        for a in argv):
        from .worker import delegate
        code = delegate(worker, argv)
        if code is not None:
            return code
    ap = argparse.ArgumentParser(prog="headroom_engine", description=__doc__.split("\n\n")[0])
    ap.add_argument("--request", default="-")
    ap.add_argument("--out")
    ap.add_argument("--steps", type=int)
    ap.add_argument("--device", choices=("auto", "cuda", "cpu"))
    ap.add_argument("--snapshot")
    ap.add_argument("--timeline")
    ap.add_argument("--memory-cap-bytes", type=int, default=0)
    ap.add_argument("--model-factory")
    ap.add_argument("--rank-dir")
    ap.add_argument("--share-gpu", action="store_true")
    ap.add_argument("--sharding", choices=("fsdp", "deepspeed"), default="fsdp")
    ap.add_argument("--alloc-conf")
    ap.add_argument("--no-attribution", action="store_true")
    ap.add_argument("--trace", action="store_true",
                    help="run the step on fake tensors (no GPU, nothing allocated) and write its allocations to --timeline")
    ap.add_argument("--trace-by-depth", action="store_true",
                    help="with --trace: trace three shallow depths and extrapolate to the model's (Note [Traced depth]; "
                         "experimental: checked on the CPU tiny model, not yet against a full trace on the GPU stack)")
    ap.add_argument("--trace-ranks", action="store_true",
                    help="with --trace and several GPUs under FSDP2: trace rank 0 over a fake process group (Note [Traced "
                         "ranks]; experimental until held to real multi-rank steps)")
    ap.add_argument("--convert-snapshot", metavar="SNAPSHOT.pickle",
                    help="convert a torch.cuda.memory._dump_snapshot file into a probe_timeline at --out, then exit")
    ap.add_argument("--serve", metavar="SOCKET",
                    help="be a warm worker on this Unix socket: import once, fork a child per run (Note [Warm worker])")
    ap.add_argument("--idle-s", type=int, default=900, help="with --serve: exit after this many idle seconds")
    ap.add_argument("--torchrun", type=int, default=0,
                    help="start N ranks of this engine through torch.distributed.run (torchrun)")
    try:
        args, rest = ap.parse_known_args(argv)
        if rest:
            ap.error(f"unrecognized arguments: {' '.join(rest)}")
    except SystemExit as e:
        return EXIT_BAD_REQUEST if e.code else EXIT_OK
    if args.convert_snapshot:
        try:
            if not args.out:
                raise BadRequest("--out", "(missing)", "--convert-snapshot writes the timeline there")
            convert_snapshot(args.convert_snapshot, args.out)
            return EXIT_OK
        except BadRequest as e:
            print(f"headroom-engine: {e}", file=sys.stderr)
            return EXIT_BAD_REQUEST
        except OSError as e:
            print(f"headroom-engine: snapshot = {args.convert_snapshot}: {e.strerror}", file=sys.stderr)
            return EXIT_BAD_REQUEST
        except Exception as e:  # a snapshot whose plain data is not laid out as PyTorch writes it
            print(f"headroom-engine: snapshot = {args.convert_snapshot}: not a PyTorch memory snapshot "
                  f"({type(e).__name__}: {short(str(e), 200)})", file=sys.stderr)
            return EXIT_BAD_REQUEST
    if args.serve:
        if args.idle_s < 1:
            print(f"headroom-engine: --idle-s = {args.idle_s}: must be at least 1", file=sys.stderr)
            return EXIT_BAD_REQUEST
        from .worker import serve
        return serve(args.serve, args.idle_s)
    if args.torchrun:
        return torchrun(args.torchrun, argv)
    rank = int(os.environ.get("RANK", "0"))
    out = Output(quiet=rank != 0)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    t_start = time.time()

    def fail(code, message, field=None):
        ev = {"event": "error", "code": code, "message": short(message, 2000)}
        if field:
            ev["field"] = field
        out.emit(ev, force=rank == 0)
        if args.rank_dir:
            try:
                write_atomically(os.path.join(args.rank_dir, f"rank{rank}.error.json"), ev)
            except OSError:
                pass
        print(f"headroom-engine: {ev['message']}", file=sys.stderr)
        return code

    def stopped():
        out.emit({"event": "stopped", "signal": _signal[0] or signal.SIGTERM}, force=rank == 0)
        # Straight out: nothing is left to save, and tearing down torch can take a second.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(128 + (_signal[0] or signal.SIGTERM))

    try:
        if args.alloc_conf:
            os.environ["PYTORCH_CUDA_ALLOC_CONF"] = args.alloc_conf  # before CUDA starts
        R = parse_request(read_request(args.request))
        if args.steps is not None:
            if not 1 <= args.steps <= 1000:
                raise BadRequest("--steps", args.steps, "must be between 1 and 1000")
            R["steps"] = args.steps
        if args.device:
            R["device"] = args.device
        if args.memory_cap_bytes < 0:
            raise BadRequest("--memory-cap-bytes", args.memory_cap_bytes, "must be positive")
        return run(args, R, out, t_start, rank)
    except BadRequest as e:
        return fail(EXIT_BAD_REQUEST, str(e), e.field)
    except Missing as e:
        return fail(EXIT_NO_DEVICE, str(e), getattr(e, "what", "package"))
    except Stopped:
        return stopped()
    except KeyboardInterrupt:
        _signal[0] = signal.SIGINT
        return stopped()
    except BaseException as e:  # the protocol's internal error, never a bare traceback
        if _stop.is_set():
            return stopped()
        import traceback
        traceback.print_exc(file=sys.stderr)
        return fail(EXIT_INTERNAL, f"internal error: {type(e).__name__}: {e}")


def run(args, R, out, t_start, rank):
    try:
        import torch
    except ImportError as e:
        raise Missing(f"the transformers engine needs PyTorch, which this interpreter ({sys.executable}) "
                      f"cannot import: {short(str(e), 120)}")
    preload()  # before CUDA starts, as the warm worker does (Note [Warm worker])
    factory_path = args.model_factory or os.environ.get("HEADROOM_MODEL_FACTORY") or None
    try:
        factory = load_factory(factory_path) if factory_path else None
    except ImportError as e:
        raise Missing(f"--model-factory {factory_path} needs a package this interpreter cannot import: "
                      f"{short(str(e), 120)}")
    cfg = R["config"]
    if args.trace:
        if cfg["mode"] != "sft":  # issue 29: TRL's step on fake tensors is not followed yet
            raise BadRequest("config.mode", cfg["mode"], f"a {cfg['mode'].upper()} step is measured, not traced yet")
        from .fake import trace
        return trace(args, R, out, factory, torch, t_start)
    D = Dist(torch, args, cfg)
    want_cuda = R["device"] != "cpu"
    cuda = want_cuda and torch.cuda.is_available()
    if R["device"] == "cuda" and not cuda:
        raise Missing("no CUDA device is usable (driver missing or no GPU)", "device")
    if D.enabled and cfg["world_size"] not in (1, D.world):
        raise BadRequest("config.world_size", cfg["world_size"], f"differs from the {D.world} ranks started")
    if D.enabled:
        cfg["world_size"] = D.world
        # Each rank records its own stream: rank 0 at the path given, rank r at PATH.rank<r>.
        if D.rank > 0:
            if args.timeline:
                args.timeline = f"{args.timeline}.rank{D.rank}"
            if args.snapshot:
                args.snapshot = f"{args.snapshot}.rank{D.rank}"
    if cuda:
        if D.device_index() >= torch.cuda.device_count():
            raise Missing(f"no CUDA device {D.device_index()} for rank {D.rank} (one GPU per rank: "
                          f"{D.world} ranks need {D.world} GPUs; --share-gpu puts them on one)", "device")
        torch.cuda.set_device(D.device_index())
        torch.cuda.init()
    device = torch.device("cuda", D.device_index()) if cuda else torch.device("cpu")
    if not cuda:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, D.world)))
    meter = CudaMeter(torch) if cuda else CpuMeter(torch)
    try:
        return measure(args, R, out, factory, t_start, torch, cfg, D, cuda, device, meter)
    finally:
        if not cuda and not _stop.is_set():
            meter.finish()  # the profiler stops on every path but a stop, which exits at once
