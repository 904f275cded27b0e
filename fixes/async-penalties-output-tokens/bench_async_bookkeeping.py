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
import ast
import contextlib
import statistics
import sys
import time
import types
from pathlib import Path

import torch

# _support/ beside it (as `gaudi-fixes test` copies it) or in the checkout
sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent / "_support")]
import harness  # noqa: E402
import vllm_gaudi_stubs as stubs  # noqa: E402
from vllm_gaudi_stubs import RUNNER_REL, UTILS_REL, H2DRecorder, SamplingParams, load_input_batch  # noqa: E402


def _self_calls(nodes):
    return {sub.func.attr for node in nodes for sub in ast.walk(node)
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute)
            and isinstance(sub.func.value, ast.Name) and sub.func.value.id == "self"}


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
    path = root / RUNNER_REL
    cls = next(n for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef) and n.name == "HPUModelRunner")
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "sample_tokens")
    start = next(i for i, s in enumerate(fn.body) if isinstance(s, ast.If)
                 and ast.unparse(s.test).startswith("self.use_async_scheduling or ")
                 and "self.use_structured_output" in ast.unparse(s.test))
    end = next(i for i, s in enumerate(fn.body) if isinstance(s, ast.For)
               and "postprocessed_sampled_token_ids[:num_reqs]" in ast.unparse(s.iter))
    tail = fn.body[start:end + 1]
    defs = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    have = {"_ensure_decodes_first", "_is_prompt", "_generate_req_id_output_token_ids_lst", "_prepare_sampling"}
    todo, lifted = _self_calls([defs[n] for n in have] + tail), set()
    while todo - have - lifted:
        n = (todo - have - lifted).pop()
        if n in defs:
            lifted.add(n)
            todo |= _self_calls([defs[n]])
        else:
            have.add(n)
    ns = {"torch": torch}
    exec(compile(ast.Module([defs[n] for n in sorted(lifted)], []), str(path), "exec"), ns)
    for n in lifted:
        setattr(runner, n, types.MethodType(ns[n], runner))
    runner.use_async_scheduling, runner.use_structured_output = True, False
    runner.device, runner.max_model_len, runner.speculative_config = torch.device("cpu"), 4096, None
    runner.invalid_req_indices = []
    runner.profiler = types.SimpleNamespace(enabled=False, record_event=lambda *a: contextlib.nullcontext())
    code = compile(ast.Module(tail, []), str(path), "exec")
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
