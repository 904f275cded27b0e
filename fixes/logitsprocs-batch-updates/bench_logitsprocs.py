"""Time one sampler call's logits-processor work on CPU, before vs after logitsprocs-batch-updates.

    python bench_logitsprocs.py BEFORE_ROOT AFTER_ROOT [--batch 256] [--vocab 151936] [--reps 7]

Each root holds vllm/ and vllm_gaudi/ (BEFORE: the tree without this fix, AFTER: with it). For
each root an InputBatch of B requests is built through the real add_request /
refresh_sampling_metadata (and, where the fix is applied, refresh_logitsprocs, as sample_tokens
calls it), with vLLM's real processors from build_logitsprocs. Timed per call:
make_selective_sampling_metadata for the B rows plus the processors the metadata hands the
sampler, applied as Sampler.apply_logits_processors / Sampler.sample do, on a [B, V] float32
logits tensor. Cases: no request uses a processor; one row has min_p 0.5 with the call's rows in
persistent order (rows 0..B-1); the same with a padded call (B-1 requests, row B-1 repeats row 0:
processed in place); and a call without the batch's last row, padded (as a decode bucket while
a prefill is in the batch: the batch-sized copy path). As a yardstick, one torch.softmax over the same logits (a
fraction of what the sampler does anyway). All variants run interleaved, round-robin; medians.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import types
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "_support"))
import harness  # noqa: E402
from vllm_gaudi_stubs import UTILS_REL, H2DRecorder, SamplingParams, load  # noqa: E402


def build(root: Path, batch: int, vocab: int, min_p_row: bool, padded: bool, subset: bool = False):
    """`padded`: B-1 requests, the call repeats the first; `subset`: B requests, the call has
    the first B-1 and repeats the first (as a decode bucket does while a prefill is in the batch)."""
    loaded = load(root, H2DRecorder(root / UTILS_REL), name=f"bench_ib_{id(root)}_{min_p_row}_{padded}_{subset}")
    config = types.SimpleNamespace(scheduler_config=types.SimpleNamespace(max_num_seqs=batch),
                                   speculative_config=None)
    procs = loaded.build_logitsprocs(config, torch.device("cpu"), False, False, [])
    ib = harness.input_batch(loaded.input_batch, vocab, procs, max_num_reqs=batch, max_model_len=64,
                             max_num_batched_tokens=4096, block_size=128)
    n = batch - 1 if padded else batch
    outputs = {}
    for i in range(n):
        params = SamplingParams(min_p=0.5) if (min_p_row and i == 0) else SamplingParams()
        rid = f"r{i}"
        outputs[rid] = [1]
        ib.add_request(harness.request_state(loaded.input_batch, rid, [1, 2, 3], params, 3, outputs[rid]))
    ib.refresh_sampling_metadata()
    if hasattr(ib, "refresh_logitsprocs"):
        ib.refresh_logitsprocs()
    rows = list(outputs.items())[:batch - 1] if subset else list(outputs.items())
    if padded or subset:
        rows.append(rows[0])  # _generate_req_id_output_token_ids_lst pads by repeating the first request
    return ib, rows


def call(ib, rows, logits):
    md = ib.make_selective_sampling_metadata(rows, skip_copy=True)
    for p in md.logitsprocs.non_argmax_invariant:
        logits = p.apply(logits)
    for p in md.logitsprocs.argmax_invariant:
        logits = p.apply(logits)
    return logits


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args()
    torch.manual_seed(0)
    base = torch.randn(a.batch, a.vocab)
    variants = {}
    for label, root, min_p, padded in (("before, no processor", a.before, False, False),
                                       ("after, no processor", a.after, False, False),
                                       ("before, one min_p row", a.before, True, False),
                                       ("after, one min_p row", a.after, True, False),
                                       ("after, one min_p row, padded call", a.after, True, True),
                                       ("after, one min_p row, call without one row", a.after, True, None)):
        ib, rows = build(root, a.batch, a.vocab, min_p, bool(padded), subset=padded is None)
        variants[label] = (lambda ib=ib, rows=rows, logits=base.clone(): call(ib, rows, logits))
    yard = base.clone()
    variants["yardstick: one softmax over the logits"] = lambda: torch.softmax(yard, dim=-1)
    times = {k: [] for k in variants}
    for _ in range(a.reps):
        for k, f in variants.items():
            t = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"B={a.batch} V={a.vocab} reps={a.reps} threads={torch.get_num_threads()} (medians, interleaved)")
    for k, v in med.items():
        print(f"  {k:40s} {v * 1e3:9.3f} ms")
    print(f"  ratio after/before, no processor:       {med['after, no processor'] / med['before, no processor']:.2f}")
    print(f"  ratio after, min_p row / after, none:    {med['after, one min_p row'] / med['after, no processor']:.1f}")
    print(f"  ratio padded min_p call / identity call: "
          f"{med['after, one min_p row, padded call'] / med['after, one min_p row']:.2f}")
    print(f"  ratio call without one row / identity:   "
          f"{med['after, one min_p row, call without one row'] / med['after, one min_p row']:.2f}")
    print(f"  min_p call / one softmax (yardstick):   "
          f"{med['after, one min_p row'] / med['yardstick: one softmax over the logits']:.2f}")


if __name__ == "__main__":
    main()
