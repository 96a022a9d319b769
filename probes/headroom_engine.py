#!/usr/bin/env python3
"""headroom_engine: the `transformers` engine of headroom-probe (its package: hrengine/ beside it).

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
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from hrengine.protocol import (EXIT_BAD_REQUEST, EXIT_INTERNAL, EXIT_NO_DEVICE, EXIT_OK,  # noqa: E402,F401
                               EXIT_OUT_OF_MEMORY, SCHEMA_VERSION, VERSION)
from hrengine.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
