"""Time one sampler call of the runner, before vs after seeded-prompt-chunks (CPU only).

    python bench_seeded_prompt_chunks.py BEFORE_ROOT AFTER_ROOT [--batch 8] [--reps 2000]

Each root holds vllm/ and vllm_gaudi/ of the same release (BEFORE: the tree without this fix,
AFTER: with it). A batch of B requests goes through the AFTER tree's real ``_update_states``
and one prefill and one decode step (harness.py); then the runner's ``_run_sampling`` of each
tree (lifted, bound to the same runner) is called on the same decode logits, interleaved
round-robin, medians. Cases: no request seeded (what every batch without ``seed`` pays); every
request seeded, no row discarded; every request seeded and one row discarded (the only case the
fix does work in). The sampler is vLLM's ``TopKTopPSampler.forward_native`` on a 256-token
vocabulary, so the call is far cheaper than on a real model's vocabulary and the ratio is an
upper bound of the cost. Not measured on HPU.
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
import lift  # noqa: E402
from vllm_gaudi_stubs import RUNNER_REL  # noqa: E402


def runner_for(root: Path, batch: int, seeded: bool) -> tuple[harness.Harness, list[str]]:
    h = harness.Harness(root, "async")
    ids = [f"r{i}" for i in range(batch)]
    for i, rid in enumerate(ids):
        h.add(rid, harness.prompt(8, i), temperature=1.0, max_tokens=64, **({"seed": i} if seeded else {}))
    h.step({rid: 8 for rid in ids})
    h.step({rid: 1 for rid in ids})
    return h, ids


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--batch", type=int, default=harness.MAX_REQS)
    ap.add_argument("--reps", type=int, default=2000)
    args = ap.parse_args()
    namespace = {"torch": torch, "htorch": types.SimpleNamespace(core=types.SimpleNamespace(mark_step=lambda: None))}
    before_fn = lift.function(args.before / RUNNER_REL, "HPUModelRunner._run_sampling", dict(namespace))
    after_fn = lift.function(args.after / RUNNER_REL, "HPUModelRunner._run_sampling", dict(namespace))
    torch.set_num_threads(1)
    for case, seeded, discarded in (("no request seeded", False, []), ("all seeded, no row discarded", True, []),
                                    ("all seeded, one row discarded", True, [0])):
        h, ids = runner_for(args.after, args.batch, seeded)
        runner = h.runner
        logits = torch.randn(args.batch, harness.VOCAB)
        times: dict[str, list[float]] = {"before": [], "after": []}
        for _ in range(args.reps):
            for name, fn in (("before", before_fn), ("after", after_fn)):
                runner.invalid_req_indices = list(discarded)
                t = time.perf_counter()
                fn(runner, False, logits, ids, args.batch)
                times[name].append(time.perf_counter() - t)
        b, a = statistics.median(times["before"]), statistics.median(times["after"])
        print(f"{case:32s} before {b * 1e6:8.1f} us  after {a * 1e6:8.1f} us  after/before {a / b:.3f}")


if __name__ == "__main__":
    main()
