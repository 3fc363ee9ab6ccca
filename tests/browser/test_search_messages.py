"""Search by error text, as a reader does it: the real encyclopedia built with
`trainwreck build --no-reproduce`, served on localhost and opened in headless Chromium; a
distinctive line of every entry is typed into the mkdocs-material search box, and that entry's page
must be the first result.

The lines are messages as the libraries print them (each is on its entry's page under "Messages
this failure prints", taken from the rules' regression logs). Two performance failures print no
message at all; for them the test types what a reader would search for instead.
Without Chromium the test is skipped, except in CI (CI=true), where it fails.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser.cdp import Browser
from tests.browser.serving import require_chromium, require_modules, serving
from trainwreck import site
from trainwreck.model import load_entries

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"

# entry -> what the reader pastes (or, for failures without a message, types)
QUERIES: dict[str, str] = {
    "api-renamed-argument": "TypeError: TrainingArguments.__init__() got an unexpected keyword argument 'evaluation_strategy'",
    "hf-model-files-missing": "OSError: Error no file named model.safetensors, or pytorch_model.bin, found in directory",
    "hub-offline-download-failure": "OSError: We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them in the cached files.",
    "meta-tensor-copy": "NotImplementedError: Cannot copy out of meta tensor; no data!",
    "numpy-2-abi-mismatch": "A module that was compiled using NumPy 1.x cannot be run in NumPy 2.0.0 as it may crash.",
    "safetensors-header-corrupt": "SafetensorError: Error while deserializing header: HeaderTooLarge",
    "trust-remote-code-required": "contains custom code which must be executed to correctly load the model.",
    "checkpoint-disk-full": "OSError: [Errno 28] No space left on device",
    "checkpoint-truncated": "PytorchStreamReader failed reading zip archive: failed finding central directory",
    "cuda-allocator-fragmentation": "cudaMalloc retries",
    "cuda-device-side-assert": "torch.AcceleratorError: CUDA error: device-side assert triggered",
    "cuda-illegal-memory-access": "CUDA error: an illegal memory access was encountered",
    # The allocator's own line: "CUDA error: out of memory" alone lands on meta-tensor-copy, whose
    # titles repeat "copy out of meta tensor" ("out" outweighs the common "memory" and "cuda").
    "cuda-oom-capacity": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 8.00 GiB",
    "cuda-driver-too-old": "RuntimeError: The NVIDIA driver on your system is too old (found version 12080).",
    "cuda-arch-unsupported": "CUDA error: no kernel image is available for execution on the device",
    "bf16-unsupported-gpu": "ValueError: Your setup doesn't support bf16/gpu. You need torch>=1.10, using Ampere GPU with cuda>=11.0",
    "flash-attn-unsupported-gpu": "RuntimeError: FlashAttention only supports Ampere GPUs or newer.",
    "triton-shared-memory-oor": "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 393216, Hardware limit: 232448. Reducing block sizes or `num_stages` may help.",
    "cudnn-cublas-status-error": "CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle, opa, opb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc)`",
    "dataloader-shm-exhausted": "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).",
    "dataloader-worker-killed": "Out of memory: Killed process 2637 (pt_data_worker)",
    "ddp-param-ready-twice": "RuntimeError: Expected to mark a variable ready only once.",
    "ddp-unused-parameters": "RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one.",
    "dynamo-recompile-limit": "torch._dynamo hit config.recompile_limit (8)",
    "fp16-loss-scale-collapse": "Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.",
    "gpu-xid-fault": "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    "nan-loss": "RuntimeError: Function 'MulBackward0' returned nan values in its 0th output.",
    "nccl-collective-timeout": "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2410, OpType=ALLREDUCE",
    "nccl-error": "NCCL error: remote process exited or there was a network error",
    "rank-device-mapping": "CUDA error: invalid device ordinal",
    "nccl-shm-exhausted": "Error while creating shared memory segment /dev/shm/nccl-",
    "nccl-ib-completion-error": "NET/IB : Got completion from peer 10.42.8.11<50213> with status=12",
    "nccl-net-transport-misconfig": "Bootstrap : no socket interface found",
    "nccl-p2p-hang": "P2P is disabled between NVLINK connected GPUs",
    "nfs-stale-file-handle": "OSError: [Errno 116] Stale file handle",
    "python-gc-straggler": "garbage collection pauses",
    # " -98" is query syntax to lunr ("must not contain 98"): docs/javascripts/search-paste.js
    "rendezvous-port-in-use": "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use",
    "sequence-length-imbalance-straggler": "sequence length imbalance",
    "silent-data-corruption": "AssertionError: Parameter hashes not matching across DP replicas",
    "tokenizers-fork-deadlock": "huggingface/tokenizers: The current process just got forked, after parallelism has already been used. Disabling parallelism to avoid deadlocks...",
    "autograd-inplace-modified": "RuntimeError: one of the variables needed for gradient computation has been modified by an inplace operation",
    "grad-ckpt-no-grad-inputs": "RuntimeError: element 0 of tensors does not require grad and does not have a grad_fn",
    "checkpoint-recompute-mismatch": "torch.utils.checkpoint.CheckpointError: torch.utils.checkpoint: Recomputed values for the following tensors have different metadata than during the forward pass.",
    "lr-scheduler-resume-reset": "learning rate warm-up restarts after resuming",
    "loss-spike": "loss spikes",
    "state-dict-key-mismatch": "RuntimeError: Error(s) in loading state_dict for ResNet:",
    "torch-load-weights-only": "_pickle.UnpicklingError: Weights only load failed.",
    "optimizer-state-resume-mismatch": "ValueError: loaded state dict contains a parameter group that doesn't match the size of optimizer's group",
    "safetensors-shared-tensor-save": "Some tensors share memory, this will lead to duplicate memory on disk and potential differences when loading them again",
    "fp16-unscale-fp16-grads": "ValueError: Attempting to unscale FP16 gradients.",
    "fsdp-flat-param-uniformity": "ValueError: `FlatParameter` requires uniform dtype but got torch.float16 and torch.float32",
    # The whole line as load_state_dict prints it (cut after "from checkpoint", the excerpt ranks
    # flash-attn-not-installed first on "a", "with" and "torch" alone).
    "fsdp-checkpoint-load-mismatch": "size mismatch for _fsdp_wrapped_module._flat_param: copying a param with shape torch.Size([20971520]) from checkpoint, the shape in current model is torch.Size([10485760]).",
    "dataloader-worker-segfault": "ERROR: Unexpected segmentation fault encountered in worker.",
    "dataloader-fd-exhausted": "RuntimeError: received 0 items of ancdata",
    "dataloader-copy-on-read-leak": "DataLoader workers memory grows every epoch copy on read",
    "dynamo-graph-breaks": "Graph break in user code at",
    "collective-desync-deadlock": "RuntimeError: Detected mismatch between collectives on ranks.",
    "slurm-time-limit-preemption": "JOB 4242 ON gpu-node-17 CANCELLED AT 2025-03-01T09:00:12 DUE TO TIME LIMIT",
    "gpu-degraded-straggler": "one GPU persistently slower",
    "fsdp-state-dict-save-hang-oom": "This may mean that this state_dict entry could point to invalid memory regions after returning from state_dict() call",
    "host-oom-sigkill": "traceback : Signal 9 (SIGKILL) received by PID 140293",
    "process-group-not-initialized": "ValueError: Default process group has not been initialized, please make sure to call init_process_group.",
    "launcher-sighup": "Received Signals.SIGHUP death signal, shutting down workers",
    "zero-checkpoint-world-size-mismatch": "deepspeed.runtime.zero.utils.ZeRORuntimeException: The checkpoint being loaded used a DP world size of 8 but the current world size is 4.",
    "zero3-partitioned-param-access": "Expected weight to be of same shape as normalized_shape, but got weight of shape [0] and normalized_shape = [4096]",
    "zero3-inflight-params": "RuntimeError: still have inflight params",
    "rendezvous-connect-timeout": "torch.distributed.DistNetworkError: The client socket has timed out after 60000ms while trying to connect to (10.20.0.4, 29400).",
    "resume-data-skip": "You're resuming from a checkpoint that ended before the epoch ended and your dataloader is not resumable.",
    "resume-divergence": "loss jumps right after resuming from a checkpoint",
    "grad-accum-loss-normalization": "gradient accumulation normalises the loss wrongly",
    "flash-attn-abi-mismatch": "undefined symbol: _ZN3c104cuda9SetDeviceEi",
    "flash-attn-not-installed": "ImportError: FlashAttention2 has been toggled on, but it cannot be used due to the following error: the package for FlashAttention2 doesn't seem to be installed.",
    "peft-target-modules-not-found": "ValueError: Target modules ['q_proj', 'v_proj'] not found in the base model. Please check the target modules and try again.",
    "wandb-init-timeout": "wandb.errors.errors.CommError: Run initialization has timed out after 90.0 sec.",
    "mps-op-not-implemented": "NotImplementedError: The operator 'aten::upsample_bicubic2d.out' is not currently implemented for the MPS device.",
    "xformers-no-operator": "NotImplementedError: No operator found for `memory_efficient_attention_forward` with inputs:",
    "cuda-extension-build-failure": "OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install root.",
    "inductor-backend-compile-failed": "torch._inductor.exc.InductorError: InvalidCxxCompiler: No working C++ compiler found in torch._inductor.config.cpp.cxx: (None, 'g++')",
    "device-mismatch": "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!",
    "cuda-fork-reinit": "RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must use the 'spawn' start method",
    "mixed-dtype-mismatch": "RuntimeError: mat1 and mat2 must have the same dtype, but got BFloat16 and Float",
    "autograd-backward-twice": "RuntimeError: Trying to backward through the graph a second time (or directly access saved tensors after they have already been freed).",
    "variable-length-batch-collate": "ValueError: Unable to create tensor, you should probably activate truncation and/or padding with 'padding=True' 'truncation=True' to have batched tensors with the same length.",
    "tokenizer-missing-pad-token": "ValueError: Asking to pad but the tokenizer does not have a padding token.",
    "trainer-no-loss-returned": "ValueError: The model did not return a loss from the inputs, only the following keys: logits. For reference, the inputs it received are input_ids,attention_mask.",
    "lr-scheduler-before-optimizer-step": "UserWarning: Detected call of `lr_scheduler.step()` before `optimizer.step()`.",
    "bitsandbytes-cuda-setup": "CUDA Setup failed despite GPU being available. Please run the following command to get more information:",
    # The summary's first line as torch prints it, ending in a colon (a field with no term to lunr
    # until search-paste.js makes it a space).
    "torchrun-child-failed-root-cause": "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
    "dataloader-spawn-pickling": "TypeError: cannot pickle '_thread.lock' object",
    "deepspeed-batch-size-mismatch": "AssertionError: Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size 64 != 4 * 2 * 2",
    "fsdp2-dtensor-mixed": "RuntimeError: aten.mm.default: got mixed torch.Tensor and DTensor, need to convert all torch.Tensor to DTensor before calling distributed operators!",
    "accelerate-fp16-without-gpu": "ValueError: fp16 mixed precision requires a GPU (not 'mps').",
    "quantized-model-offload-refused": "ValueError: Some modules are dispatched on the CPU or the disk. Make sure you have enough GPU RAM to fit the quantized model.",
}
# Lines whose "word: value" pairs lunr would read as field queries ("exitcode: -9" asked for a
# field named exitcode, so the words that name the failure were dropped): search-paste.js makes
# every colon a space. Each must still land on its entry.
FIELD_LIKE: dict[str, str] = {
    "host-oom-sigkill": "E1130 10:12:01.381000 4121 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -9) local_rank: 1 (pid: 4188) of binary: /usr/bin/python3",
}
# The failures that print no message of their own (slowdowns, silent training curves).
NO_MESSAGE = {
    "python-gc-straggler",
    "sequence-length-imbalance-straggler",
    "lr-scheduler-resume-reset",
    "loss-spike",
    "dataloader-copy-on-read-leak",
    "gpu-degraded-straggler",
    "resume-divergence",
    "grad-accum-loss-normalization",
}


def test_every_entry_has_a_query() -> None:
    entries, _ = load_entries(REPO)
    assert {entry.id for entry in entries} == set(QUERIES)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A copy of the repository's knowledge base, built without running notebooks, served."""
    require_chromium()
    require_modules("mkdocs", "material")
    root = tmp_path_factory.mktemp("search") / "repo"
    # tests/examples too: check asserts that every `runs: cpu` example has its test there.
    for name in (
        "entries",
        "rules",
        "schemas",
        "docs",
        "notebooks",
        "tests/logs",
        "tests/examples",
    ):
        shutil.copytree(REPO / name, root / name)
    shutil.copy(REPO / "mkdocs.yml", root / "mkdocs.yml")
    site.build(root, reproduce=False)
    with serving(site.make_server(root / "site")) as url:
        yield url


@pytest.fixture(scope="module")
def browser(served: str) -> Iterator[Browser]:
    with Browser(require_chromium()) as chromium:
        yield chromium


RESULTS = """(() => {
  const meta = document.querySelector('.md-search-result__meta');
  const links = [...document.querySelectorAll('.md-search-result__item > a')];
  if (!meta || !links.length || !meta.textContent.match(/\\d/)) return null;
  return links.map(a => a.getAttribute('href'));
})()"""


def search(browser: Browser, served: str, query: str) -> list[str]:
    browser.open(f"{served}/")
    browser.evaluate(
        "document.querySelector('label.md-search__icon, .md-header__button[for=__search]').click()"
    )
    browser.wait_for(
        "document.activeElement && document.activeElement.matches('input.md-search__input') || (document.querySelector('input.md-search__input').focus(), false)"
    )
    browser.type_text(query)
    return browser.wait_for(RESULTS, timeout=30)


def test_each_message_is_on_its_entry_page(served: str) -> None:
    """The queries are real: each is printed under "Messages this failure prints" on its page."""
    for entry_id, query in QUERIES.items():
        if entry_id in NO_MESSAGE:
            continue
        with urllib.request.urlopen(f"{served}/entries/{entry_id}/") as reply:
            page = reply.read().decode("utf-8")
        start = page.index("Messages this failure prints")
        block = html.unescape(re.sub(r"<[^>]+>", "", page[start : page.index("</details>", start)]))
        # The block shows one line per wording (numbers aside: pids, sizes, ranks).
        assert re.sub(r"\d+", "N", query) in re.sub(r"\d+", "N", block), (entry_id, query)


def test_a_pasted_message_finds_its_entry_first(browser: Browser, served: str) -> None:
    misses = {}
    firsts = {}
    for entry_id, query in QUERIES.items():
        try:
            hrefs = search(browser, served, query)
        except TimeoutError:
            misses[entry_id] = f"no results for {query!r}"
            continue
        firsts[entry_id] = hrefs[0]
        if f"entries/{entry_id}/" not in hrefs[0]:
            misses[entry_id] = hrefs[:3]
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "search-first-results.json").write_text(json.dumps(firsts, indent=2))
    assert not misses, misses


def test_word_colon_value_pairs_are_words_not_fields(browser: Browser, served: str) -> None:
    misses = {}
    for entry_id, query in FIELD_LIKE.items():
        hrefs = search(browser, served, query)
        if f"entries/{entry_id}/" not in hrefs[0]:
            misses[entry_id] = hrefs[:3]
    assert not misses, misses


def test_a_digit_alone_finds_pages(browser: Browser, served: str) -> None:
    """Every term is searched as a prefix, so "1" asks for every word starting with 1; lunr's own
    word automaton once held "1.0.10", a word on no page, and the search failed with no results
    (site/search_worker.py repairs it). Each digit must find pages."""
    found = {digit: search(browser, served, digit) for digit in "0123456789"}
    assert all(found.values()), found


def test_triage_filters_narrow_the_candidates(browser: Browser, served: str) -> None:
    """With JavaScript the triage page's nested lists become filters; every entry is reachable."""
    browser.open(f"{served}/triage/")
    browser.wait_for("!document.querySelector('.tw-triage-filters').hidden")
    visible = """[...document.querySelectorAll('.tw-candidate')]
        .filter(m => m.closest('li').offsetParent !== null)
        .map(m => m.closest('li').querySelector('a').getAttribute('href').split('/').slice(-2)[0])"""
    everything = set(browser.evaluate(visible))
    assert everything == set(QUERIES)  # the page reaches every entry

    def choose(name: str, value: str) -> set[str]:
        browser.evaluate(
            f"(s => {{ s.value = {json.dumps(value)}; s.dispatchEvent(new Event('change')); }})"
            f"(document.querySelector('.tw-triage-filters select[name={name}]'))"
        )
        return set(browser.evaluate(visible))

    crashes = choose("symptom", "crash")
    assert {"ddp-unused-parameters", "cuda-device-side-assert"} <= crashes
    assert "python-gc-straggler" not in crashes
    ddp = choose("framework", "ddp")
    assert "ddp-unused-parameters" in ddp and "nccl-error" in ddp  # "any framework" stays
    single = choose("scale", "single-gpu")
    assert "ddp-unused-parameters" not in single and "cuda-device-side-assert" in single
    assert "match" in browser.evaluate("document.querySelector('.tw-triage-count').textContent")
    browser.screenshot(ARTIFACTS / "triage-filtered.png", full_page=False)


def test_triage_filters_live_in_the_address(browser: Browser, served: str) -> None:
    """A filtered view is a link: the filters are read from the address and written back."""
    browser.open(f"{served}/triage/?symptom=crash&framework=ddp&scale=no-such-scale")
    browser.wait_for("!document.querySelector('.tw-triage-filters').hidden")
    chosen = browser.evaluate(
        "Object.fromEntries([...document.querySelectorAll('.tw-triage-filters select')]"
        ".map(s => [s.name, s.value]))"
    )
    # a value the page does not offer is ignored, not an empty page
    assert chosen == {"symptom": "crash", "component": "", "framework": "ddp", "scale": ""}
    shown = set(
        browser.evaluate(
            "[...document.querySelectorAll('.tw-candidate')]"
            ".filter(m => m.closest('li').offsetParent !== null)"
            ".map(m => m.closest('li').querySelector('a').getAttribute('href').split('/').slice(-2)[0])"
        )
    )
    assert "ddp-unused-parameters" in shown and "python-gc-straggler" not in shown
    browser.evaluate(
        "(s => { s.value = ''; s.dispatchEvent(new Event('change')); })"
        "(document.querySelector('.tw-triage-filters select[name=framework]'))"
    )
    browser.evaluate(
        "(s => { s.value = 'single-gpu'; s.dispatchEvent(new Event('change')); })"
        "(document.querySelector('.tw-triage-filters select[name=scale]'))"
    )
    query = browser.evaluate("window.location.search")
    assert sorted(query.lstrip("?").split("&")) == ["scale=single-gpu", "symptom=crash"], query


def test_code_wraps_in_the_column_and_rule_ids_stay_whole(browser: Browser, served: str) -> None:
    """Code and output wrap inside a narrow content column instead of being cut at its right;
    rule ids in the rules table break at their hyphens only."""
    browser.call(
        "Emulation.setDeviceMetricsOverride",
        width=700,
        height=900,
        deviceScaleFactor=1,
        mobile=False,
    )
    try:
        browser.open(f"{served}/entries/nccl-collective-timeout/")
        browser.wait_for("document.querySelector('.md-typeset pre > code') !== null")
        assert (
            browser.evaluate(
                "getComputedStyle(document.querySelector('.md-typeset pre > code')).whiteSpace"
            )
            == "pre-wrap"
        )
        cut = browser.evaluate(
            "[...document.querySelectorAll('.md-typeset pre > code')]"
            ".filter(c => c.scrollWidth > c.clientWidth + 1).length"
        )
        assert cut == 0
        browser.open(f"{served}/rules/")
        browser.wait_for("document.querySelector('.md-typeset td code') !== null")
        styles = browser.evaluate(
            "(s => [s.wordBreak, s.overflowWrap])"
            "(getComputedStyle(document.querySelector('.md-typeset td code')))"
        )
        assert styles == ["normal", "normal"], styles
    finally:
        browser.call("Emulation.clearDeviceMetricsOverride")
