"""Speculative-decoding steps of vllm_gaudi on CPU, and vLLM's GPU path for the same step.

What runs (``harness.Harness`` with ``Config(spec_tokens=…)``; its pieces are here):

- vllm_gaudi's ``InputBatch`` (``hpu_input_batch.py``) executed with vLLM's **real** modules of the
  tree in ``sys.modules`` (``SamplingMetadata``, the logits-processor package, ``SamplingParams``),
  so the processors it hands out are the classes vLLM's ``RejectionSampler`` checks for; only the
  block table (a no-op) and ``vllm_gaudi.utils`` (the real ``async_h2d_copy`` / ``async_h2d_update``
  lifted out of their file: it imports habana_frameworks) stand in;
- its logits processors built by vLLM's **real** ``build_logitsprocs`` with a speculative config
  (vLLM then builds only ``MinTokensLogitsProcessor``);
- the runner's real ``_update_states`` (it writes the scheduled draft tokens into the batch),
  ``_prepare_spec_decode_inputs`` and ``_get_cumsum_and_arange`` (the HPU layout of the draft
  rows: every request padded to the step's most drafts, ``-1`` target indices for the padding),
  and ``sample_tokens``' decode-sampling statement (``if self.use_structured_output: … else: …``
  inside ``if num_decodes > 0:``), lifted as they are, with the one device string ``"hpu"``
  read as ``"cpu"``;
- vLLM's **real** ``Sampler`` and ``RejectionSampler``, with vllm_gaudi's ``rejection_sample``
  (``hpu_rejection_sampler.py``, executed for real) installed in vLLM's module, and any method it
  sets on ``RejectionSampler`` on that class, for the HPU step only, as vllm_gaudi installs them at
  import.

``gpu_step`` is vLLM's GPU path for the same step, through ``rejection_step`` (conform's GPU
engine samples a step with drafts through it too): the compact layout of
``GPUModelRunner._calc_spec_decode_metadata`` (request i's drafts at rows ``cu[i-1]..cu[i]-1``,
its bonus row after them), one ``SamplingMetadata`` row per request with ``output_token_ids``,
vLLM's real ``MinTokensLogitsProcessor`` told of every request in order, vLLM's real
``RejectionSampler``. The stand-ins: vLLM's Triton kernels do not run on CPU. On an all-greedy
step ``greedy_rejection_sample`` (a torch loop) takes ``rejection_sample``'s place; its
contract — per request, each draft position's target argmax is written until the first draft that
differs from it (that position's argmax included); the bonus token follows only when every draft
matched; everything else is ``PLACEHOLDER_TOKEN_ID`` — is checked by ``test_stand_in`` cases in
the tests that use it. On a step with a sampled request vLLM's own ``rejection_sample`` runs with
``spec_sampled``'s stand-ins for its four kernels, uniforms in float32.

The model (``harness.Model.context_row``): a logits row is a fixed function of the context it follows,
so a draft position predicts what the plain decode of the same context predicts.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import logging
import sys
import types
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import torch

import harness
import lift  # noqa: F401
import vllm_gaudi_stubs as stubs

REJECTION_REL = Path("vllm_gaudi/v1/sample/hpu_rejection_sampler.py")


class RealVllm:
    """vLLM's sampler, rejection sampler, spec-decode metadata and logits-processor package of the
    tree, imported for real (after ``harness.Vllm.get``: one vllm tree per process)."""

    _loaded: dict[Path, Any] = {}

    @classmethod
    def get(cls, root: Path) -> Any:
        root = root.resolve()
        if root not in cls._loaded:
            harness.Vllm.get(root)
            level = logging.root.manager.disable
            logging.disable(logging.WARNING)
            try:
                from vllm.v1.sample import logits_processor, rejection_sampler
                from vllm.v1.sample.metadata import SamplingMetadata
                from vllm.v1.sample.sampler import Sampler
                from vllm.v1.spec_decode.metadata import SpecDecodeMetadata
            finally:
                logging.disable(level)
            harness.no_pinned_memory()  # vLLM's penalties ask for pinned memory
            # What InputBatch must import to hand out the classes RejectionSampler checks for
            # (``harness.Harness`` may have left the tree's logits-processor package, executed
            # by ``vllm_gaudi_stubs.load``, under these names: whichever is there now is kept).
            pinned = {n: m for n, m in sys.modules.items()
                      if n.startswith(stubs.LOGITSPROCS_PKG) or n == "vllm.v1.sample.metadata"}
            hpu_installs = _load_hpu_installs(root, rejection_sampler)
            cls._loaded[root] = types.SimpleNamespace(
                pinned=pinned, logits_processor=logits_processor, rejection_sampler=rejection_sampler,
                vllm_rejection_sample=rejection_sampler.rejection_sample, SamplingMetadata=SamplingMetadata,
                Sampler=Sampler, RejectionSampler=rejection_sampler.RejectionSampler,
                SpecDecodeMetadata=SpecDecodeMetadata, hpu_rejection_sample=hpu_installs["rejection_sample"],
                hpu_installs=hpu_installs)
        return cls._loaded[root]


def _load_hpu_installs(root: Path, module: Any) -> dict[str, Any]:
    """What ``hpu_rejection_sampler.py`` (executed for real) sets in vLLM's rejection-sampler module
    at import: vllm_gaudi's ``rejection_sample`` (and what a fix installs beside it), by name; vLLM's
    own are put back afterwards (``installed`` swaps them in for an HPU step)."""
    return _load_hpu_installs_from(root / REJECTION_REL, module)


def _load_hpu_installs_from(path: Path, module: Any) -> dict[str, Any]:
    """``_load_hpu_installs`` of the file at `path` (a mutant of the tree's, for a test). A method it
    sets on vLLM's ``RejectionSampler`` is one too, named ``RejectionSampler.<name>``."""
    cls = module.RejectionSampler
    saved, saved_cls = dict(vars(module)), dict(vars(cls))
    namespace: dict[str, Any] = {"__name__": "gaudi_fixes_hpu_rejection_sampler", "__file__": str(path)}
    try:
        exec(compile(path.read_text(), str(path), "exec"), namespace)
    finally:
        installs = {k: v for k, v in vars(module).items() if k not in saved or saved[k] is not v}
        methods = {k: v for k, v in vars(cls).items() if k not in saved_cls or saved_cls[k] is not v}
        for owner, changed, before in ((module, installs, saved), (cls, methods, saved_cls)):
            for k in changed:
                if k in before:
                    setattr(owner, k, before[k])
                else:
                    delattr(owner, k)
    installs.update({f"RejectionSampler.{k}": v for k, v in methods.items()})
    installs["rejection_sample"] = namespace["rejection_sample"]
    return installs


@contextlib.contextmanager
def installed(module: Any, fn: Callable[..., torch.Tensor], also: Optional[dict[str, Any]] = None):
    """``fn`` as ``module.rejection_sample`` (what ``RejectionSampler.forward`` calls), and `also`'s
    attributes by name (``RejectionSampler.<name>``: a method of vLLM's class), while the block runs."""
    values = {**(also or {}), "rejection_sample": fn}

    def owner(key: str) -> tuple[Any, str]:
        head, _, name = key.rpartition(".")
        return (getattr(module, head) if head else module), name

    saved = {k: getattr(*owner(k)) for k in values}
    for k, v in values.items():
        setattr(*owner(k), v)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(*owner(k), v)


def greedy_rejection_sample(draft_token_ids: torch.Tensor, num_draft_tokens: list[int], max_spec_len: int,
                            cu_num_draft_tokens: torch.Tensor, draft_probs: Optional[torch.Tensor],
                            target_logits: torch.Tensor, bonus_token_ids: torch.Tensor, sampling_metadata: Any,
                            *args: Any, **kwargs: Any) -> torch.Tensor:
    """Stand-in for vLLM's ``rejection_sample`` on an all-greedy batch, the contract of its Triton
    ``rejection_greedy_sample_kernel`` (compact layout): per request, the target argmax of each
    draft position is written until the first draft that differs from it (that position
    included); the bonus token follows only when all drafts matched; the rest is
    ``PLACEHOLDER_TOKEN_ID`` (-1). Extra arguments of later releases are accepted, their default
    (standard rejection sampling) only."""
    assert sampling_metadata.all_greedy, "the stand-in covers the greedy kernel only"
    for name in ("fly_window_size", ):
        assert kwargs.get(name) is None, f"the stand-in covers standard rejection sampling only ({name})"
    assert not kwargs.get("synthetic_mode"), "the stand-in covers standard rejection sampling only"
    argmax = target_logits.argmax(dim=-1).tolist()
    drafts = draft_token_ids.view(-1).tolist()
    bonus = bonus_token_ids.view(-1).tolist()
    out = torch.full((len(num_draft_tokens), max_spec_len + 1), -1, dtype=torch.int32)
    start = 0
    for i, n in enumerate(num_draft_tokens):
        rejected = False
        for pos in range(n):
            out[i, pos] = argmax[start + pos]
            if drafts[start + pos] != argmax[start + pos]:
                rejected = True
                break
        if not rejected:
            out[i, n] = bonus[i]
        start += n
    return out


def _const_device(tree: ast.AST) -> ast.AST:
    """The lifted statements on CPU: the device string ``"hpu"`` read as ``"cpu"``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value == "hpu":
            node.value = "cpu"
    return tree


def decode_sampling_statement(path: Path) -> Any:
    """``sample_tokens``' decode-sampling statement (``if self.use_structured_output: … else: …``
    inside ``if num_decodes > 0:``), compiled for ``exec`` with the step's locals."""
    fn = lift.definition(path, "HPUModelRunner.sample_tokens")
    where = "HPUModelRunner.sample_tokens"
    decodes = lift.find_statement(fn, path=path, where=where, test="num_decodes > 0")
    sub = lift.find_statement(decodes, path=path, where=where, test="self.use_structured_output",
                              contains="rejection_sampler")
    module = ast.Module([_const_device(ast.parse(ast.unparse(sub)).body[0])], [])
    return compile(ast.fix_missing_locations(module), str(path), "exec")


def load_input_batch(root: Path, h2d: stubs.H2DRecorder, name: str = "gaudi_fixes_spec_input_batch") -> Any:
    """``hpu_input_batch.py`` executed with vLLM's real modules (``RealVllm.get`` first); only the block
    table and ``vllm_gaudi.utils`` stand in."""
    real = RealVllm.get(root)
    block_table = types.ModuleType("vllm.v1.worker.block_table")
    block_table.MultiGroupBlockTable = stubs._BlockTable  # noqa: SLF001  (the harness's no-op table)
    gaudi = types.ModuleType("vllm_gaudi")
    gaudi.__path__ = []
    utils = types.ModuleType("vllm_gaudi.utils")
    utils.async_h2d_copy, utils.async_h2d_update = h2d.async_h2d_copy, h2d.async_h2d_update
    replaced = {**real.pinned, "vllm.v1.worker.block_table": block_table, "vllm_gaudi": gaudi,
                "vllm_gaudi.utils": utils}
    with stubs._installed(replaced):  # noqa: SLF001
        module = stubs._exec_module(name, root / stubs.INPUT_BATCH_REL)  # noqa: SLF001
    assert module.SamplingMetadata is real.SamplingMetadata
    assert module.LogitsProcessors is real.logits_processor.LogitsProcessors
    return module


def context_row(context: list[int]) -> torch.Tensor:
    """The logits row after `context` (``harness.Model.row``'s for a request's own tokens)."""
    return harness.context_row_of(context)


def greedy(context: list[int], n: int, row: Callable[[list[int]], torch.Tensor] = context_row) -> list[int]:
    """The `n` tokens greedy decoding of `row`'s model gives after `context`: drafts a drafter that
    proposes the model's own continuation would send."""
    out: list[int] = []
    for _ in range(n):
        out.append(int(row(context + out).argmax()))
    return out


@dataclasses.dataclass
class GpuRequest:
    """One request of a GPU-path step: its parameters, prompt, output so far, drafts."""

    params: Any
    prompt: list[int]
    output: list[int]
    drafts: list[int]


def gpu_step(root: Path, requests: list[GpuRequest], context_row: Callable[[list[int]], torch.Tensor],
             generators: Optional[dict[int, torch.Generator]] = None) -> list[list[int]]:
    """vLLM's GPU path for one spec-decode step of `requests` (batch rows in this order): vLLM's real
    GPU ``InputBatch`` of the tree as ``GpuEngine`` builds it (``conform_engines.gpu_input_batch``,
    with a speculative config), each request added in order as ``GPUModelRunner._update_states``
    adds a new or resumed one (its output so far, `generators` by row) and its drafts set as its
    ``spec_token_ids`` (``update_req_spec_token_ids``), the batch's ``sampling_metadata`` after
    ``refresh_metadata``, and ``rejection_step``. The tokens each request gets."""
    import conform_engines
    real = RealVllm.get(root)
    m = conform_engines.GpuModules.get(root)
    rows = [[context_row(r.prompt + r.output + r.drafts[:j]) for j in range(len(r.drafts) + 1)] for r in requests]
    vocab = rows[0][0].numel()
    batch = conform_engines.gpu_input_batch(m, vocab, spec=True)
    fields = {f.name for f in dataclasses.fields(m.gib.CachedRequestState)}
    for i, r in enumerate(requests):
        kw = dict(req_id=str(i), prompt_token_ids=list(r.prompt), mm_features=[], sampling_params=r.params,
                  generator=(generators or {}).get(i), block_ids=([],),
                  num_computed_tokens=len(r.prompt) + len(r.output), output_token_ids=list(r.output))
        state = m.gib.CachedRequestState(**{k: v for k, v in kw.items() if k in fields})
        batch.add_request(state)
        batch.update_req_spec_token_ids(state, {state.req_id: list(r.drafts)})
    batch.refresh_metadata()
    return rejection_step(real, [r.drafts for r in requests], rows, batch.sampling_metadata, vocab)[0]


def rejection_step(real: Any, drafts: list[list[int]], rows: list[list[torch.Tensor]], sampling_metadata: Any,
                   vocab: int, discarded: list[int] = ()) -> tuple[list[list[int]], Any]:
    """vLLM's GPU path of a spec-decode step's sampling, the one reference of the fix tests
    (``gpu_step``) and conform (``conform_spec.gpu_spec_step``): per request of the batch, its
    `drafts` and its logits `rows` (one per draft, then its bonus row) in the compact layout of
    ``GPUModelRunner._calc_spec_decode_metadata``, vLLM's real ``RejectionSampler`` — on an
    all-greedy batch with ``greedy_rejection_sample`` for the Triton kernel, else with vLLM's own
    ``rejection_sample`` and ``spec_sampled``'s stand-ins for its kernels, uniforms in float32
    (``spec_sampled.mirror_hpu_draws``) — and ``parse_output`` (the `discarded` rows' tokens
    dropped). The tokens per request and the logprobs lists (or None)."""
    import spec_sampled
    target, bonus, flat = [], [], []
    for own in rows:
        for j, x in enumerate(own):
            (target if j < len(own) - 1 else bonus).append(len(flat))
            flat.append(x)
    num_draft = [len(d) for d in drafts]
    metadata = real.SpecDecodeMetadata(
        draft_token_ids=torch.tensor([t for d in drafts for t in d], dtype=torch.int32),
        num_draft_tokens=num_draft, cu_num_draft_tokens=torch.from_numpy(np.cumsum(num_draft, dtype=np.int32)),
        cu_num_sampled_tokens=torch.from_numpy(np.cumsum([n + 1 for n in num_draft], dtype=np.int32)),
        target_logits_indices=torch.tensor(target, dtype=torch.int32),
        bonus_logits_indices=torch.tensor(bonus, dtype=torch.int32),
        logits_indices=torch.arange(len(flat), dtype=torch.int32))
    rejection = real.RejectionSampler(real.Sampler())
    stand_in = (installed(real.rejection_sampler, greedy_rejection_sample) if sampling_metadata.all_greedy
                else spec_sampled.mirror_hpu_draws(real.rejection_sampler))
    with stand_in:
        out = rejection(metadata, None, torch.stack(flat), sampling_metadata)
    parsed = rejection.parse_output(out.sampled_token_ids, vocab, discarded, out.logprobs_tensors)
    return parsed if isinstance(parsed, tuple) else (parsed, None)


# A three-request scenario for the spec-decode fix tests: X and Y are prefilled and decode once
# without drafts, then these steps: Z's prefill beside it (or not), each decode's draft count (0:
# no drafts), and the request whose first draft is wrong (None: all drafts right).
SCENARIO_PROMPTS = {"X": harness.prompt(6, 1), "Y": harness.prompt(5, 2), "Z": harness.prompt(7, 3)}
SCENARIO_STEPS = (
    (True, {"X": 3, "Y": 1}, None),  # bucket 2, no padding, Z's prefill in the same step
    (False, {"X": 1, "Y": 3, "Z": 2}, "Y"),  # bucket 4, padded after 3 decodes
    (False, {"X": 2, "Y": 0, "Z": 3}, "X"),
    (False, {"X": 3, "Y": 3, "Z": 1}, None),
    (False, {"X": 1, "Y": 2, "Z": 3}, None),
)
