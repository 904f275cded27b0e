#!/usr/bin/env python3
"""How many single-statement bugs in vllm_gaudi's sampling path the conformance suite names.

    python scripts/conform-mutants.py --root TREE [--schedules N] [--only NAME,...]

TREE: a default-profile tree (vllm/ and vllm_gaudi/). It is copied once; each mutant below changes
one statement of the copy's ``_update_states``, the sampling calls (``_run_sampling``,
``_prepare_sampling``, ``sample_tokens``' structured-output block and tail) or its ``InputBatch``;
the suite (fixes/_support/conform.py, in this process: vLLM is imported once) runs N schedules (and KEPT) on
it. A mutant is named when the suite's findings differ from the unmutated copy's (each schedule
reseeds every draw, so the same schedules give the same findings). Prints one line per mutant (the
features its differences are in, the first difference) and the score; exits 1 when a mutant not
marked ``harmless`` is missed, 3 when a mutant's statement is not in the tree (upstream moved it:
update the list).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

SUPPORT = Path(__file__).resolve().parent.parent / "fixes" / "_support"
RUNNER = "vllm_gaudi/v1/worker/hpu_model_runner.py"
BATCH = "vllm_gaudi/v1/worker/hpu_input_batch.py"

# (name, file, statement as in the tree, its replacement, harmless: True when no request is handed anything
# else, said why beside it; a harmless miss does not fail the run)
MUTANTS = [
    # _update_states
    ("seed-never-applied", RUNNER, "generator.manual_seed(sampling_params.seed)", "generator.manual_seed(0)", False),
    ("removal-not-a-change", RUNNER, "batch_changed = len(removed_req_indices) > 0 or len(req_ids_to_add) > 0",
     "batch_changed = len(req_ids_to_add) > 0", False),
    ("addition-not-a-change", RUNNER, "batch_changed = len(removed_req_indices) > 0 or len(req_ids_to_add) > 0",
     "batch_changed = len(removed_req_indices) > 0", False),
    ("async-resume-output-ids", RUNNER, "req_state.output_token_ids = resumed_token_ids[-num_output_tokens:]",
     "req_state.output_token_ids = resumed_token_ids[:num_output_tokens]", False),
    ("async-resume-not-recovered", RUNNER, "if self.use_async_scheduling and num_output_tokens > 0:",
     "if False:", False),
    ("computed-tokens-stale-in-batch", RUNNER,
     "self.input_batch.num_computed_tokens_cpu[req_index] = (num_computed_tokens)", "pass", False),
    ("unscheduled-kept", RUNNER, "unscheduled_req_ids = cached_req_ids - scheduled_req_ids",
     "unscheduled_req_ids = set()", False),
    ("no-metadata-refresh", RUNNER, "        if batch_changed:\n            self.input_batch.refresh_sampling_metadata()",
     "        if False:\n            self.input_batch.refresh_sampling_metadata()", False),
    # the sampling calls
    # Harmless on the default profile: the rows this copy writes are already on the device. It runs
    # only on a batch-changed step, right after _update_states' refresh_sampling_metadata, whose
    # _make_sampling_metadata copies every row of every tensor handed here (temperature unless
    # all_greedy, top_p/top_k/penalties unless no request asks); after that refresh only swap_states
    # moves host rows, and swap-states-sampling-params marks those rows stale and copies them
    # whatever skip_copy says (prompt_token_ids: the cache, which refresh and swap_states empty).
    # Measured (a probe comparing, at every call, each handed row with its host row): 0 mismatches
    # in 200 schedules on v0.26.0, v0.30.0 and v0.33.0. Not harmless without swap-states-sampling-
    # params (a swap on a batch-changed step is then copied by this line only): on v0.30.0's default
    # profile minus that fix, the suite names it at 12 schedules.
    ("metadata-never-copied", RUNNER, "skip_copy=not batch_changed)", "skip_copy=True)", True),
    ("logits-requests-dropped", RUNNER,
     "sampling_metadata = self._prepare_sampling(batch_changed, request_ids, pad_to, logits_requests)",
     "sampling_metadata = self._prepare_sampling(batch_changed, request_ids, pad_to, None)",
     True),  # harmless while every prompt chunk has at most one logits row (the default profile's fixes)
    # the prompt chunks' logits rows (_extract_prefill_batch_contents): taken one position early
    ("logits-one-position-early", RUNNER,
     "logits_positions = list(range(seq_num_scheduled_tokens - num_output_logits, seq_num_scheduled_tokens))",
     "logits_positions = list(range(seq_num_scheduled_tokens - num_output_logits - 1, seq_num_scheduled_tokens - 1))",
     False),
    ("structured-rows-order", RUNNER, "pd_info.decode_req_ids + prefill_sampled_requests,",
     "prefill_sampled_requests + pd_info.decode_req_ids,", False),
    ("output-ids-not-extended", RUNNER, "req_state.output_token_ids.extend(sampled_ids)", "pass", False),
    ("sampled-over-previous-token", RUNNER,
     "self.input_batch.token_ids_cpu[req_idx, start_idx:end_idx] = sampled_ids",
     "self.input_batch.token_ids_cpu[req_idx, start_idx - 1:end_idx - 1] = sampled_ids", False),
    ("async-placeholder-missing", RUNNER, "req_state.output_token_ids.append(-1)", "pass", False),
    # a logits-processor plugin that reads the generated tokens (not only their number, as vLLM's
    # built-ins do) is not counted among what reads them: under async scheduling it sees -1
    # placeholders where the previous step's tokens belong
    ("plugin-reads-placeholders", RUNNER,
     "plugins = any(type(p).__module__ != builtin for p in batch.logitsprocs.all)", "plugins = False", False),
    # a plugin's state cannot be seen from the batch (vLLM's built-ins keep theirs on the host):
    # taken for idle, it is never run
    ("plugin-taken-for-idle", BATCH, "            return not getattr(logitsproc, attr)\n    return False",
     "            return not getattr(logitsproc, attr)\n    return True", False),
    # the input batch
    ("temperature-ignored", BATCH, "self.temperature_cpu[req_index] = sampling_params.temperature",
     "self.temperature_cpu[req_index] = 1.0", False),
    ("top-k-ignored", BATCH, "self.top_k_cpu[req_index] = top_k", "self.top_k_cpu[req_index] = 0", False),
    ("frequency-penalty-ignored", BATCH,
     "self.frequency_penalties_cpu[req_index] = sampling_params.frequency_penalty",
     "self.frequency_penalties_cpu[req_index] = 0.0", False),
    ("repetition-penalty-ignored", BATCH,
     "self.repetition_penalties_cpu[req_index] = sampling_params.repetition_penalty",
     "self.repetition_penalties_cpu[req_index] = 1.0", False),
    ("generator-not-registered", BATCH, "self.generators[req_index] = request.generator", "pass", False),
    ("generator-not-moved-on-condense", BATCH, "self.generators[empty_index] = generator", "pass", False),
    ("computed-tokens-zero-on-add", BATCH, "self.num_computed_tokens_cpu[req_index] = request.num_computed_tokens",
     "self.num_computed_tokens_cpu[req_index] = 0", False),
    ("prompt-ids-not-written", BATCH, "self.token_ids_cpu[req_index, :num_prompt_tokens] = request.prompt_token_ids",
     "pass", False),
    # make_selective_sampling_metadata (what _prepare_sampling hands the sampler)
    ("all-greedy", BATCH, "temperature=self.temperature[req_indices],\n            all_greedy=self.all_greedy,",
     "temperature=self.temperature[req_indices],\n            all_greedy=True,", False),
    ("all-random", BATCH, "all_random=self.all_random,\n            top_p=None if self.no_top_p else self.top_p[req_indices],",
     "all_random=True,\n            top_p=None if self.no_top_p else self.top_p[req_indices],", False),
    # (the line logprob-token-ids adds between max_num_logprobs and prompt_token_ids makes it unique)
    ("no-logprobs", BATCH, "max_num_logprobs=self.max_num_logprobs,\n"
     "            logprob_token_ids=logprob_token_ids,  # gaudi-fixes logprob-token-ids",
     "max_num_logprobs=None,\n"
     "            logprob_token_ids=logprob_token_ids,  # gaudi-fixes logprob-token-ids", False),
    ("top-p-dropped", BATCH, "top_p=None if self.no_top_p else self.top_p[req_indices],", "top_p=None,", False),
]


# Schedules run besides the first N: each names a mutant the first 12 miss. 125 (async):
# async-resume-not-recovered, named in schedule 7 until the prompt_logprobs draws (e0f8d21) changed
# schedules 0-11; over schedules 0-199 the suite still names it (25 differences, 10 before), first at 125.
# 17 (async, the server loads the logits-processor plugins): plugin-reads-placeholders, which over the
# plain schedules 0-299 only 15, 17 and 247 name (every one with the plugins loaded).
KEPT = [125, 17]


def scratch_tree(source: Path, tmp: str) -> Path:
    """A copy of `source`'s vllm_gaudi/ (to mutate) beside a link to its vllm/."""
    root = Path(tmp) / "tree"
    shutil.copytree(source / "vllm_gaudi", root / "vllm_gaudi")
    (root / "vllm").symlink_to((source / "vllm").resolve())
    return root


def findings(conform, root: Path, plan: list) -> set:
    out = set()
    for schedule in plan:
        f = conform.run_schedule(root, schedule, True)
        sys.modules.update(conform.GpuModules.get(root).saved)
        out |= {(schedule.seed, feature, sentence) for feature, sentence in f.found}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True, type=Path)
    ap.add_argument("--schedules", type=int, default=24)
    ap.add_argument("--only", default="", help="comma-separated mutant names")
    args = ap.parse_args()
    sys.path.insert(0, str(SUPPORT))
    import conform
    only = {n for n in args.only.split(",") if n}
    chosen = [m for m in MUTANTS if not only or m[0] in only]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="conform-mutants-") as tmp:
        root = scratch_tree(args.root, tmp)
        missing = [f"{name}: {rel} has no `{old}` exactly once" for name, rel, old, _, _ in chosen
                   if (root / rel).read_text().count(old) != 1]
        if missing:
            print("\n".join(missing))
            return 3
        conform.GpuModules.get(root.resolve())
        plan = [conform.schedules.generate(n, "async" if n % 2 else "sync")
                for n in [*range(args.schedules), *(k for k in KEPT if k >= args.schedules)]]
        base = findings(conform, root.resolve(), plan)
        named = 0
        missed = []
        for name, rel, old, new, harmless in chosen:
            path = root / rel
            text = path.read_text()
            path.write_text(text.replace(old, new))
            try:
                diff = findings(conform, root.resolve(), plan) ^ base
            finally:
                path.write_text(text)
            if diff:
                named += 1
                first = sorted(diff)[0]
                features = ", ".join(sorted({feature for _, feature, _ in diff}))
                print(f"named   {name} ({features}): schedule {first[0]}, {first[1]}: {first[2][:160]}")
            else:
                print(f"MISSED  {name}{' (harmless: see MUTANTS)' if harmless else ''}")
                if not harmless:
                    missed.append(name)
    print(f"score: {named} of {len(chosen)} mutants named ({args.schedules} schedules each; baseline "
          f"{len(base)} finding(s); {time.monotonic() - started:.0f} s)")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
