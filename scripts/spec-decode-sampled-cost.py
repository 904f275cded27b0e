#!/usr/bin/env python3
"""CPU cost of a spec step (python scripts/spec-decode-sampled-cost.py TREE B S V; TREE with the default profile applied) through vLLM's RejectionSampler with the HPU installs: all greedy vs all sampled."""
import sys, time, dataclasses, types
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / 'fixes' / '_support'))
import torch, spec_decode
root = Path(sys.argv[1]); B, S, V = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
real = spec_decode.RealVllm.get(root)
torch.manual_seed(0)
per = S + 1
logits = torch.randn(B * per, V) * 4
md = real.SpecDecodeMetadata(draft_token_ids=torch.randint(0, V, (B * S,), dtype=torch.int32), num_draft_tokens=[S] * B,
    cu_num_draft_tokens=torch.arange(1, B + 1, dtype=torch.int32) * S, cu_num_sampled_tokens=torch.arange(1, B + 1, dtype=torch.int32) * per,
    target_logits_indices=torch.tensor([i * per + j for i in range(B) for j in range(S)], dtype=torch.int32),
    bonus_logits_indices=torch.tensor([i * per + S for i in range(B)], dtype=torch.int32), logits_indices=torch.arange(B * per))
cfg = types.SimpleNamespace(scheduler_config=types.SimpleNamespace(max_num_seqs=B), speculative_config=types.SimpleNamespace(num_speculative_tokens=S))
lp = real.logits_processor.build_logitsprocs(cfg, torch.device("cpu"), False, False, [])
fields = {f.name for f in dataclasses.fields(real.SamplingMetadata)}
def meta(greedy):
    v = dict(temperature=torch.full((B,), -1.0 if greedy else 0.8), all_greedy=greedy, all_random=not greedy, top_p=None, top_k=None,
             generators={}, max_num_logprobs=None, no_penalties=True, prompt_token_ids=None, frequency_penalties=torch.zeros(B),
             presence_penalties=torch.zeros(B), repetition_penalties=torch.ones(B), output_token_ids=[[] for _ in range(B)],
             allowed_token_ids_mask=None, bad_words_token_ids={}, logitsprocs=lp, spec_token_ids=[[0] * S for _ in range(B)])
    return real.SamplingMetadata(**{k: x for k, x in v.items() if k in fields})
rs = real.RejectionSampler(real.Sampler())
res = {}
with spec_decode.installed(real.rejection_sampler, real.hpu_rejection_sample, real.hpu_installs):
    for rep in range(2):
        for greedy in (True, False):
            m = meta(greedy); t = time.perf_counter()
            for _ in range(20):
                rs(md, None, logits.clone(), m)
            res[greedy] = (time.perf_counter() - t) / 20
print(f"B={B} S={S} V={V}: greedy-only step {res[True]*1e3:.2f} ms, sampled step {res[False]*1e3:.2f} ms, ratio {res[False]/res[True]:.2f}")
