"""Hang forensics: Flight Recorder dumps and stack dumps of every rank, read as data and aligned
across ranks to name the rank that hung the job.

Modules: `dumps` (recognising a dump by content, the restricted unpickler, the typed `Dump` and
`Record`), `fastread` and `pickleops` (a pickle dump's repeated entries read as runs of rows
without building them, with a data-only interpreter), `traces` (a dump as compact per-group
arrays), `stacks` (py-spy and faulthandler output, grouping ranks by stack), `analysis` (per process group alignment: culprits, mismatches,
p2p without a partner, rolled-over buffers, late ranks), `report` (reading the inputs, the one
conclusion and its `Finding`), `table` (the alignment table `explain flight-recorder` prints).
Imports only the shared base (findings, errors); diagnose and explain import it, never back.
"""
