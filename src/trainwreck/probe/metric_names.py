"""The names of the Prometheus metrics the probe's signals are exposed as (`probe.prometheus`),
shared with `trainwreck export prometheus`, whose alerts query them. No dependencies."""

from __future__ import annotations

PREFIX = "trainwreck"
STEP_SECONDS = f"{PREFIX}_step_seconds"  # histogram: step durations, per rank
STEP_ERRORS = f"{PREFIX}_step_errors_total"  # counter: steps that raised
GC_PAUSE_SECONDS = f"{PREFIX}_gc_pause_seconds"  # histogram: recorded collections, per generation
CUDA_ALLOCATED_BYTES = f"{PREFIX}_cuda_allocated_bytes"  # gauges: the allocator's last state
CUDA_RESERVED_BYTES = f"{PREFIX}_cuda_reserved_bytes"
CUDA_INACTIVE_SPLIT_BYTES = f"{PREFIX}_cuda_inactive_split_bytes"
CUDA_ALLOC_RETRIES = f"{PREFIX}_cuda_alloc_retries_total"  # counters, as torch counts them
CUDA_OOMS = f"{PREFIX}_cuda_ooms_total"
METRIC = f"{PREFIX}_metric"  # gauge: the last value of each user metric (label `name`)
LAST_EVENT = f"{PREFIX}_probe_last_event_timestamp_seconds"

# Bucket bounds (seconds). GC: the straggler rule's 100 ms threshold is a bound, so an alert can
# count the pauses above it exactly.
GC_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
STEP_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
