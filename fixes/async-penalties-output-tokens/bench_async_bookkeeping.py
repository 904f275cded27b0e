"""Time the runner's post-sampling bookkeeping under async scheduling, before vs after
async-penalties-output-tokens, on CPU.

    python bench_async_bookkeeping.py BEFORE_ROOT AFTER_ROOT [--batch 256] [--reps 2000]

Each root holds vllm_gaudi/ (BEFORE: the tree without this fix, AFTER: with it). For each root
an InputBatch of B decoding requests with no penalties, bad_words or logits-processor plugin is
built through the real add_request / refresh_sampling_metadata, and the REAL tail of
HPUModelRunner.sample_tokens (from ``if self.use_async_scheduling or
self.use_structured_output:`` to the loop extending ``output_token_ids``, with the runner
methods it calls) is lifted from the tree's hpu_model_runner.py. Timed per step: (1) the tail
alone, with async scheduling (where the fix appends one -1 per sampled row), (2) the tail plus
the next step's ``_prepare_sampling`` for the B rows (where the fix checks whether anything reads
the tokens; nothing does, so nothing is copied). Both roots run interleaved, round-robin;
medians. The outputs are cut back every 64 steps (outside the timing) so they stay short.
Not measured on HPU: on a device the fix's point is that it makes no device-to-host copy.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

# _support/ beside it (as `gaudi-fixes test` copies it) or in the checkout
sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent / "_support")]
import engine_step  # noqa: E402
import harness  # noqa: E402
import vllm_gaudi_stubs as stubs  # noqa: E402
from vllm_gaudi_stubs import UTILS_REL, H2DRecorder, SamplingParams, load_input_batch  # noqa: E402


def build(root: Path, batch: int, name: str):
    module = load_input_batch(root, H2DRecorder(root / UTILS_REL), name=name)
    ib = harness.input_batch(module, 128, max_num_reqs=batch, max_model_len=4096, max_num_batched_tokens=4096,
                             block_size=128)
    runner = stubs.Runner(root, ib)
    for i in range(batch):
        rid = f"r{i}"
        params = SamplingParams(temperature=0.8)
        state = runner.requests[rid] = harness.request_state(module, rid, [1, 2, 3], params, 3)
        ib.add_request(state, None)
    ib.refresh_sampling_metadata()
    # the tail and every runner method it calls, lifted as the fix tests lift them (engine_step)
    code = engine_step.lift_step(runner, root)["tail"]
    runner.use_async_scheduling, runner.max_model_len = True, 4096
    runner.invalid_req_indices = []
    requests = list(ib.req_ids)
    sampled = torch.randint(0, 128, (batch, ), dtype=torch.int32)

    def tail_only():
        exec(code, {"self": runner, "torch": torch, "num_reqs": batch, "num_decodes": batch,
                    "decode_sampled_token_ids": [sampled], "prefill_sampled_token_ids": [],
                    "decode_sampled_requests": requests, "prefill_sampled_requests": [],
                    "spec_decode_num_tokens": None})

    def tail_and_next_prepare():
        tail_only()
        runner._prepare_sampling(False, requests, batch)

    def reset():
        for state in runner.requests.values():
            del state.output_token_ids[:]

    return tail_only, tail_and_next_prepare, reset


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--reps", type=int, default=2000)
    a = ap.parse_args()
    built = {"before": build(a.before, a.batch, "bench_before"), "after": build(a.after, a.batch, "bench_after")}
    times = {(k, what): [] for k in built for what in ("tail", "tail + next _prepare_sampling")}
    for rep in range(a.reps):
        for k, (tail_only, both, reset) in built.items():
            if rep % 64 == 0:
                reset()
            t = time.perf_counter()
            tail_only()
            times[(k, "tail")].append(time.perf_counter() - t)
            t = time.perf_counter()
            both()
            times[(k, "tail + next _prepare_sampling")].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"B={a.batch} reps={a.reps} async scheduling, no penalties / bad_words / plugin (medians, interleaved; "
          "CPU, not measured on HPU)")
    for (k, what), v in med.items():
        print(f"  {k:6s} {what:32s} {v * 1e6:9.1f} us")
    for what in ("tail", "tail + next _prepare_sampling"):
        print(f"  ratio after/before, {what}: {med[('after', what)] / med[('before', what)]:.2f}")


if __name__ == "__main__":
    main()
