"""`trainwreck memory`: replay a CUDA caching-allocator trace on CPU under other settings.

A stage of its own (core install: the standard library only, never torch):

- `snapshot`: reads a `torch.cuda.memory._dump_snapshot` pickle through a restricted unpickler
  into typed `TraceEvent`s;
- `settings`: `AllocatorSettings` and the `PYTORCH_CUDA_ALLOC_CONF` syntax;
- `allocator`: the model of the allocator's rules (c10/cuda/CUDACachingAllocator.cpp);
- `expandable`: the expandable-segments part of the model;
- `replay`: drives the model through a trace and checks its fidelity to the recorded events;
- `whatif`: the recorded run, the tried settings (or the default sweep) and the ranked answer;
- `traces`: hand-made and generated traces (snapshot dicts) for tests, docs and the benchmark;
- `command`: the `trainwreck memory replay` command and its text and JSON output;
- `advice`: the note `diagnose` adds to the OOM findings a replay answers.
"""
