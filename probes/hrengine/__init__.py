"""The transformers engine of headroom-probe, as a package (its entry point is
probes/headroom_engine.py): protocol, request, build, optimizers, parallel, step, attribution,
trace, meters, and the vocabulary generated from core's tables. Only the modules that run the
step import torch, and they take it as an argument."""
