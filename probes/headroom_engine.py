#!/usr/bin/env python3
"""headroom_engine: the `transformers` engine of headroom-probe, started as

    python3 headroom_engine.py --request FILE [--out FILE] [--steps N] [--device auto|cuda|cpu] ...

The engine is the package hrengine/ beside this file (hrengine/main.py has the whole usage); this
entry point puts it on the path, so that it runs from the source tree, the build tree and
share/headroom alike, and torchrun restarts this same file on every rank."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from hrengine.protocol import (EXIT_BAD_REQUEST, EXIT_INTERNAL, EXIT_NO_DEVICE, EXIT_OK,  # noqa: E402,F401
                               EXIT_OUT_OF_MEMORY, SCHEMA_VERSION, VERSION)
from hrengine.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
