#!/usr/bin/env python3
"""Which of the conformance suite's checks name single-statement bugs in the sampled rows of
vllm_gaudi's speculative decoding (spec-decode-sampled-rows' code in hpu_rejection_sampler.py).

    python scripts/conform-spec-mutants.py --root TREE [--seed S] [--schedules N] [--only NAME,...]

TREE: a default-profile tree (vllm/ and vllm_gaudi/). It is copied once; each mutant below changes
one statement of the copy's hpu_rejection_sampler.py, and the suite (fixes/_support/conform.py, in
this process) runs the N speculative-decoding schedules from S (schedule s with s % 5 == 4) on it.
A finding is new when the unmutated copy does not have it. Per mutant: the requests (schedule and
request) each check names (spec_support, spec_sampled_tokens, seeded equality: spec_tokens or
seeded_tokens on a seeded request, spec_tokens on a greedy request, raised, other), and how many
of them that check alone names. Exits 1 when a mutant is not named, 3 when a mutant's statement
is not in the tree.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import re
import sys
import tempfile
import time
from pathlib import Path

SUPPORT = Path(__file__).resolve().parent.parent / "fixes" / "_support"
SAMPLER = "vllm_gaudi/v1/sample/hpu_rejection_sampler.py"
# conform-mutants.py's runner of the suite over a plan (its file name is no module name).
_spec = importlib.util.spec_from_file_location("conform_mutants", Path(__file__).with_name("conform-mutants.py"))
_plain = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_plain)

# (name, statement as in the tree, its replacement)
MUTANTS = [
    ("accept-always", "accepted = (draft_prob > 0) & (target_prob > 0) & (target_prob / draft_prob >= uniform)",
     "accepted = draft_prob > 0"),
    ("recovered-is-the-draft", "recovered = (residual * q.reciprocal().unsqueeze(1)).argmax(dim=-1)",
     "recovered = drafts"),
    ("top-k-dropped-on-spec-rows", "sampling_metadata = replace(sampling_metadata, temperature=temperature)",
     "sampling_metadata = replace(sampling_metadata, temperature=temperature, top_k=None)"),
    ("bonus-from-the-draft",
     "bonus = torch.where(kept.all(dim=-1), bonus_token_ids.view(-1).to(torch.int64), PLACEHOLDER_TOKEN_ID)",
     "bonus = torch.where(kept.all(dim=-1), drafts.gather(-1, (own.sum(dim=-1, keepdim=True) - 1).clamp(min=0))"
     ".view(-1), PLACEHOLDER_TOKEN_ID)"),
    ("accepted-after-a-rejection", "kept = (accepted | ~own).to(torch.int32).cumprod(dim=-1).bool()",
     "kept = accepted | ~own"),
    ("seeded-exponentials-from-the-global-stream", "q[i].exponential_(generator=generator)", "q[i].exponential_()"),
    ("seeded-uniforms-from-the-global-stream", "uniform[i, :num_draft_tokens[i]].uniform_(generator=generator)",
     "uniform[i, :num_draft_tokens[i]].uniform_()"),
    ("gaussian-noise-for-unseeded-rows",
     "q = torch.empty((batch_size, vocab_size), dtype=torch.float32, device=device).exponential_()",
     "q = torch.empty((batch_size, vocab_size), dtype=torch.float32, device=device).normal_()"),
]


def check_of(schedule: dict, feature: str, sentence: str) -> str:
    if "lies outside the support" in sentence:
        return "spec_support"
    if any(s in sentence for s in ("a speculative step emits", "the tokens before its last",
                                   "yet emitted in its place")):
        return "spec_sampled_tokens"
    if sentence.endswith("[seeded_tokens]"):
        return "seeded equality"
    if "raised" in sentence and feature == "spec_decode" and "the HPU path raised" in sentence:
        return "raised"
    m = re.search(r"request (r\d+) \(", sentence)
    if "vLLM's GPU path gives" in sentence and "with drafts" in sentence and m:
        params = schedule.requests[m.group(1)].params
        return "seeded equality" if params["temperature"] > 0 else "spec_tokens (greedy)"
    return "other"


def findings(conform, root: Path, plan: list) -> set:
    """The suite's findings on `plan`, with hpu_rejection_sampler.py executed afresh (``RealVllm``
    keeps what it installs from the first load)."""
    import spec_decode
    real = spec_decode.RealVllm.get(root)
    real.hpu_installs = spec_decode._load_hpu_installs(root, real.rejection_sampler)  # noqa: SLF001
    real.hpu_rejection_sample = real.hpu_installs["rejection_sample"]
    return _plain.findings(conform, root, plan)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True, type=Path)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--schedules", type=int, default=20, help="speculative-decoding schedules")
    ap.add_argument("--only", default="", help="comma-separated mutant names")
    args = ap.parse_args()
    sys.path.insert(0, str(SUPPORT))
    import conform
    only = {n for n in args.only.split(",") if n}
    chosen = [m for m in MUTANTS if not only or m[0] in only]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="conform-spec-mutants-") as tmp:
        root = _plain.scratch_tree(args.root, tmp)
        missing = [f"{name}: {SAMPLER} has no `{old}` exactly once" for name, old, _ in chosen
                   if (root / SAMPLER).read_text().count(old) != 1]
        if missing:
            print("\n".join(missing))
            return 3
        conform.GpuModules.get(root.resolve())
        first = args.seed + (4 - args.seed % 5) % 5
        plan = [conform.schedules.of(s) for s in range(first, first + 5 * args.schedules, 5)]
        by_seed = {s.seed: s for s in plan}
        base = findings(conform, root.resolve(), plan)
        missed = []
        path = root / SAMPLER
        text = path.read_text()
        for name, old, new in chosen:
            path.write_text(text.replace(old, new))
            try:
                diff = findings(conform, root.resolve(), plan) - base
            finally:
                path.write_text(text)
            per_request = collections.defaultdict(set)  # (schedule, request): the checks naming it
            for seed, feature, sentence in diff:
                m = re.search(r"request (r\d+)", sentence)
                per_request[seed, m.group(1) if m else None].add(check_of(by_seed[seed], feature, sentence))
            named = collections.Counter(c for checks in per_request.values() for c in checks)
            alone = collections.Counter(next(iter(c)) for c in per_request.values() if len(c) == 1)
            if not diff:
                missed.append(name)
                print(f"MISSED  {name}")
                continue
            first_finding = sorted(diff)[0]
            schedules = len({seed for seed, _ in per_request})
            print(f"named   {name}: in {schedules} of {len(plan)} schedules, {len(per_request)} requests; per check "
                  "(requests named, by it alone): "
                  + ", ".join(f"{c} {n} ({alone.get(c, 0)})" for c, n in sorted(named.items())))
            print(f"        first: schedule {first_finding[0]}: {first_finding[2][:220]}")
    print(f"{len(chosen) - len(missed)} of {len(chosen)} mutants named ({len(plan)} spec schedules from {first}; "
          f"baseline {len(base)} finding(s); {time.monotonic() - started:.0f} s)")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
