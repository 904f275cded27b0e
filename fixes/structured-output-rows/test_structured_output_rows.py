"""Structured output: each logits row is sampled with its own request's parameters (CPU; needs
torch and numpy).

When a step holds a structured-output request, ``HPUModelRunner.sample_tokens`` does not sample
each forward pass on its own: it keeps the decodes' logits and each prefill batch's logits, joins
them decodes first and samples them in one call. This test runs that branch — the REAL
``if self.use_structured_output:`` block of ``sample_tokens`` that joins the logits and calls
``_run_sampling``, lifted out of the tree's ``hpu_model_runner.py`` with the runner's own
``_get_prompts_and_decodes``, ``_ensure_decodes_first``, ``_is_prompt``, ``_run_sampling``,
``_prepare_sampling`` and ``_generate_req_id_output_token_ids_lst`` — on the REAL ``InputBatch``
(vLLM's imports stubbed, see vllm_gaudi_stubs.py). The forward passes are not run: the logits
they would return are made here, one row per request that has logits, in the runner's layout
(decode rows trimmed to the decodes; a prefill batch gives one row per request whose chunk ends its
prompt), each row marked with its request so the recorded sampler can tell whose row it got.

Every row the sampler is handed must carry its own request's temperature, top_p, top_k,
generator, penalties, prompt and output tokens, and there must be one metadata row per logits row.

Run: ``GAUDI_FIXES_ROOT=<dir holding vllm_gaudi/> pytest fixes/structured-output-rows``
"""

from __future__ import annotations

import ast
import os
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np
import pytest
import torch
import vllm_gaudi_stubs as stubs
from vllm_gaudi_stubs import INPUT_BATCH_REL, RUNNER_REL, UTILS_REL, H2DRecorder, SamplingParams, SchedulerOutput, \
    load_input_batch

VOCAB = 256
SAMPLING_EPS = 1e-5

_root = os.environ.get("GAUDI_FIXES_VLLM_GAUDI_ROOT") or os.environ.get("GAUDI_FIXES_ROOT")
if not _root:
    pytest.skip("GAUDI_FIXES_ROOT is not set: point it at a directory holding vllm_gaudi/", allow_module_level=True)
ROOT = Path(_root)
if not (ROOT / INPUT_BATCH_REL).is_file() or not (ROOT / RUNNER_REL).is_file():
    pytest.skip(f"no {INPUT_BATCH_REL} / {RUNNER_REL} under {ROOT}: needs a vllm_gaudi tree", allow_module_level=True)

# D0 is the JSON-constrained request, greedy; D1 is seeded; each has its own penalties.
REQUESTS = {
    "D0": SamplingParams(temperature=0.0, top_p=1.0, top_k=0, frequency_penalty=0.0, presence_penalty=0.0,
                         repetition_penalty=1.2),
    "D1": SamplingParams(temperature=0.9, top_p=0.8, top_k=50, frequency_penalty=0.5, presence_penalty=0.1,
                         repetition_penalty=1.0, seed=7),
    "P2": SamplingParams(temperature=1.3, top_p=0.95, top_k=5, frequency_penalty=0.2, presence_penalty=0.6,
                         repetition_penalty=1.1),
    "P3": SamplingParams(temperature=0.6, top_p=0.7, top_k=20, frequency_penalty=0.0, presence_penalty=0.3,
                         repetition_penalty=1.3, seed=11),
}
STRUCTURED = {"D0"}
PROMPT_LEN = {"D0": 6, "D1": 9, "P2": 7, "P3": 40}
PROMPTS = {rid: [(11 * n + 3 * i + 2) % VOCAB for i in range(PROMPT_LEN[rid])] for n, rid in enumerate(REQUESTS)}
OUTPUTS = {"D0": [101, 102], "D1": [103]}  # the decodes' tokens so far
MARK = 0  # logits column that holds the row's request number


def _lift_block(path: Path) -> types.CodeType:
    """The body of sample_tokens' ``if self.use_structured_output:`` that joins the logits."""
    tree = ast.parse(path.read_text(), str(path))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "HPUModelRunner")
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "sample_tokens")
    for node in ast.walk(fn):
        if (isinstance(node, ast.If) and ast.unparse(node.test).startswith("self.use_structured_output")
                and any(isinstance(s, ast.Assign) and ast.unparse(s.targets[0]) == "logits_combined"
                        for s in node.body)):
            return compile(ast.Module(node.body, []), str(path), "exec")
    raise LookupError(f"{path}: no `if self.use_structured_output:` block joining logits_combined in sample_tokens "
                      "(vllm_gaudi changed; update the test)")


def _lift_class(path: Path, name: str, namespace: dict) -> type:
    tree = ast.parse(path.read_text(), str(path))
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)
    if node is None:
        raise LookupError(f"{path}: no class {name} (vllm_gaudi changed; update the test)")
    exec(compile(ast.Module([node], []), str(path), "exec"), namespace)
    return namespace[name]


@dataclass
class SamplerCall:
    logits: torch.Tensor
    metadata: Any


class RecordingSampler:

    def __init__(self):
        self.calls: list[SamplerCall] = []

    def __call__(self, logits: torch.Tensor, sampling_metadata: Any) -> Any:
        self.calls.append(SamplerCall(logits.clone(), sampling_metadata))
        n = logits.shape[0]
        return types.SimpleNamespace(sampled_token_ids=torch.zeros(n, 1, dtype=torch.int64), logprobs_tensors=None)


class Runner(stubs.Runner):
    """The stubs' runner plus the methods the structured-output branch calls."""

    def __init__(self, root: Path, input_batch: Any):
        super().__init__(root, input_batch)
        path = root / RUNNER_REL
        namespace = {"Optional": Optional, "Union": Union, "torch": torch,
                     "htorch": types.SimpleNamespace(core=types.SimpleNamespace(mark_step=lambda: None))}
        from dataclasses import dataclass as _dataclass
        namespace["PromptDecodeInfo"] = _lift_class(path, "PromptDecodeInfo", {"dataclass": _dataclass})
        names = {"_run_sampling", "_get_prompts_and_decodes"}
        methods = stubs._exec_defs(stubs._top_level_defs(path, names, "HPUModelRunner"), path, namespace)
        for name in names:
            setattr(self, name, types.MethodType(methods[name], self))
        self.structured_block = _lift_block(path)
        self.vllm_config = types.SimpleNamespace(speculative_config=None)
        self.profiler = types.SimpleNamespace(enabled=False)
        self.sampler = RecordingSampler()
        self.use_structured_output = True
        self.bitmask_calls: list[torch.Tensor] = []

    def apply_grammar_bitmask(self, scheduler_output: Any, grammar_output: Any, logits: torch.Tensor) -> None:
        self.bitmask_calls.append(logits)  # the grammar's own row mapping is not this test's subject


class Scenario:

    def __init__(self):
        self.module = load_input_batch(ROOT, H2DRecorder(ROOT / UTILS_REL))
        self.batch = self.module.InputBatch(max_num_reqs=8, max_model_len=128, max_num_batched_tokens=128,
                                            device=torch.device("cpu"), pin_memory=False, vocab_size=VOCAB,
                                            block_sizes=[128], kernel_block_sizes=[128])
        self.runner = Runner(ROOT, self.batch)
        self.generators: dict[str, torch.Generator] = {}

    def request(self, rid: str, num_computed_tokens: int) -> Any:
        params = REQUESTS[rid]
        generator = None
        if params.seed is not None:
            generator = self.generators[rid] = torch.Generator().manual_seed(params.seed)
        return self.module.CachedRequestState(req_id=rid, prompt_token_ids=PROMPTS[rid], mm_features=[],
                                              sampling_params=params, generator=generator, block_ids=[[0]],
                                              num_computed_tokens=num_computed_tokens,
                                              output_token_ids=list(OUTPUTS.get(rid, [])))

    def structured_step(self, prompts: dict[str, int]) -> SamplerCall:
        """D0 and D1 are decoding (they came in on an earlier step); `prompts` arrive and are
        scheduled that many tokens. Runs sample_tokens' structured-output branch; returns the
        sampler call."""
        batch, runner = self.batch, self.runner
        for rid in ("D0", "D1"):
            state = runner.requests[rid] = self.request(rid, PROMPT_LEN[rid])
            batch.add_request(state, None)
        batch.refresh_sampling_metadata()
        for rid in ("D0", "D1"):  # an earlier step; this one adds the prompts
            # a decode has computed every token but the one it samples from (its last output)
            batch.num_computed_tokens_cpu[batch.req_id_to_index[rid]] = PROMPT_LEN[rid] + len(OUTPUTS.get(rid, [])) - 1
        for rid in prompts:
            state = runner.requests[rid] = self.request(rid, 0)
            batch.add_request(state, None)
        batch_changed = True
        batch.refresh_sampling_metadata()
        scheduled = {"D0": 1, "D1": 1, **prompts}
        sched = SchedulerOutput(num_scheduled_tokens=scheduled)
        sched.total_num_scheduled_tokens = sum(scheduled.values())
        sched.kv_connector_metadata = None
        runner._ensure_decodes_first(sched)
        pd_info = runner._get_prompts_and_decodes(sched)
        num_decodes = len(pd_info.decode_req_ids)
        # The forward passes' logits, in the runner's layout: the decode bucket trimmed to the
        # decodes (`logits_device[:num_decodes]`), then one prefill batch's logits, one row per
        # request whose chunk completes its prompt (`logits_requests`).
        decode_rows = pd_info.decode_req_ids + [pd_info.decode_req_ids[0]] * 2  # a padded bucket
        logits_decode = [self.logits(decode_rows)[:num_decodes]]
        logits_requests = [rid for rid in pd_info.prompt_req_ids if prompts[rid] >= PROMPT_LEN[rid]]
        logits_prompt = [self.logits(logits_requests)]
        namespace = {
            "self": runner, "torch": torch, "batch_changed": batch_changed, "scheduler_output": sched,
            "grammar_output": types.SimpleNamespace(structured_output_request_ids=sorted(STRUCTURED)),
            "pd_info": pd_info, "num_decodes": num_decodes, "logits_decode": logits_decode,
            "logits_prompt": logits_prompt, "prefill_sampled_requests": list(logits_requests),
            "prefill_sampled_token_ids": [], "decode_sampled_token_ids": [], "logprobs_segments": []
        }
        exec(runner.structured_block, namespace)
        assert len(runner.sampler.calls) == 1, "the structured-output branch made no single sampler call"
        return runner.sampler.calls[0]

    @staticmethod
    def logits(rows: list[str]) -> torch.Tensor:
        logits = torch.zeros(len(rows), VOCAB)
        for i, rid in enumerate(rows):
            logits[i, MARK] = list(REQUESTS).index(rid)
        return logits


def _expected(rid: str) -> dict[str, float]:
    params = REQUESTS[rid]
    return {  # as InputBatch.add_request stores them
        "temperature": -1.0 if params.temperature < SAMPLING_EPS else params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k if 0 < params.top_k < VOCAB else VOCAB,
        "frequency_penalties": params.frequency_penalty,
        "presence_penalties": params.presence_penalty,
        "repetition_penalties": params.repetition_penalty,
    }


def _mismatches(call: SamplerCall, generators: dict[str, torch.Generator]) -> list[str]:
    md = call.metadata
    rows = [list(REQUESTS)[int(v)] for v in call.logits[:, MARK].tolist()]
    n_meta = len(md.temperature)
    wrong = []
    if n_meta != len(rows):
        wrong.append(f"{n_meta} metadata rows for {len(rows)} logits rows {rows}: the sampler's "
                     f"temperature/penalty rows do not line up with the logits")
    for i, rid in enumerate(rows[:n_meta]):
        want = _expected(rid)
        for name, value in want.items():
            tensor = getattr(md, name)
            if tensor is None:
                continue  # no_top_p / no_top_k: nothing to hand over
            got = tensor[i].item()
            if np.float32(got).item() != np.float32(value).item():
                wrong.append(f"logits row {i} ({rid}) was sampled with {name} {got:g}, it asked {value:g}")
        gen = md.generators.get(i)
        if gen is not generators.get(rid):
            owner = next((r for r, g in generators.items() if g is gen), None)
            wrong.append(f"logits row {i} ({rid}) got {owner + chr(39) + 's generator' if owner else 'no generator'}"
                         f", it has {'its own seed' if rid in generators else 'none'}")
        if md.output_token_ids[i] != OUTPUTS.get(rid, []):
            wrong.append(f"logits row {i} ({rid}) was penalised for output tokens {md.output_token_ids[i]}, "
                         f"its own are {OUTPUTS.get(rid, [])}")
        prompt = md.prompt_token_ids[i].tolist()
        if prompt[:PROMPT_LEN[rid]] != PROMPTS[rid] or any(t != VOCAB for t in prompt[PROMPT_LEN[rid]:]):
            wrong.append(f"logits row {i} ({rid}) was penalised against another request's prompt")
    return wrong


def test_mixed_step_rows_follow_their_requests():
    """D0 (JSON, greedy) and D1 decode while P2 prefills: one call, rows [D0, D1, P2]."""
    scenario = Scenario()
    call = scenario.structured_step({"P2": PROMPT_LEN["P2"]})
    wrong = _mismatches(call, scenario.generators)
    assert not wrong, "structured-output step sampled rows with another request's parameters:\n" + "\n".join(wrong)


def test_prompt_chunk_without_logits():
    """As above, plus P3 whose first chunk does not finish its prompt and so has no logits row —
    without async scheduling on the first structured-output step, since ``_prepare_inputs`` gives
    such a chunk a logit only when ``use_structured_output`` was already set, by the previous step.
    The rows must still be [D0, D1, P2], not shifted by P3."""
    scenario = Scenario()
    call = scenario.structured_step({"P2": PROMPT_LEN["P2"], "P3": 16})
    wrong = _mismatches(call, scenario.generators)
    assert not wrong, "structured-output step sampled rows with another request's parameters:\n" + "\n".join(wrong)


def test_scenario_is_a_mixed_step():
    """The step has decodes and prefills, and the grammar bitmask was applied to the joined logits."""
    scenario = Scenario()
    call = scenario.structured_step({"P2": PROMPT_LEN["P2"]})
    rows = [list(REQUESTS)[int(v)] for v in call.logits[:, MARK].tolist()]
    assert rows == ["D0", "D1", "P2"]
    assert len(scenario.runner.bitmask_calls) == 1
