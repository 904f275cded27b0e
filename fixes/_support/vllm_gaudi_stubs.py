"""vLLM and vllm_gaudi code loaded outside vLLM and without an HPU: the one test-support module
every fix's tests (and the conformance suite) share. ``gaudi-fixes test`` writes it beside each
fix's tests.

``$GAUDI_FIXES_ROOT`` holds ``vllm/`` and ``vllm_gaudi/``. What runs is the trees' own code:

- ``load_input_batch`` executes vllm_gaudi's ``v1/worker/hpu_input_batch.py``; ``load`` does the
  same after executing vLLM's REAL logits-processor package (``interface.py``, ``state.py``,
  ``builtin.py``, ``__init__.py``), so ``BatchUpdateBuilder`` and the min_p / logit_bias /
  min_tokens processors are vLLM's own.
- ``Runner`` lifts the runner functions that reorder the batch and build the sampler's metadata
  out of the real ``hpu_model_runner.py`` (``ensure_multi_token_decodes_last``,
  ``HPUModelRunner._ensure_decodes_first``, ``_is_prompt``, ``_generate_req_id_output_token_ids_lst``,
  ``_prepare_sampling``, and on request the statements of ``sample_tokens`` from its
  ``self._ensure_decodes_first(...)`` up to ``self._get_prompts_and_decodes(...)``), so a test
  drives the runner's own sequence rather than a paraphrase of it.
- ``load_hpu_gather_logprobs`` lifts vllm_gaudi's ``_hpu_gather_logprobs`` (``patches.py``);
  ``load_sampler`` / ``load_sampler_source`` execute vLLM's ``topk_topp_sampler.py`` on an
  HPU-like platform.

Stubbed is only what those files import besides: small stand-ins for the vLLM modules they name
(on a CPU machine without vLLM's dependencies the real ones do not import) and
``vllm_gaudi.utils`` (it imports habana_frameworks). The host-to-device helpers are the REAL
``async_h2d_copy`` / ``async_h2d_update`` (vllm_gaudi/utils.py) and ``async_tensor_h2d``
(vllm/utils/torch_utils.py), lifted out of their files and called with device "cpu", so the
"device" tensors are separate CPU tensors that change only when those helpers copy into them —
exactly the state the sampler sees on an HPU. Block tables are no-ops; pinned memory is off.
"""

from __future__ import annotations

import __future__
import ast
import contextlib
import enum
import logging
import sys
import types
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Mapping, NamedTuple, Optional, Union

import numpy as np
import torch

import lift

INPUT_BATCH_REL = Path("vllm_gaudi/v1/worker/hpu_input_batch.py")
RUNNER_REL = Path("vllm_gaudi/v1/worker/hpu_model_runner.py")
UTILS_REL = Path("vllm_gaudi/utils.py")
PATCHES_REL = Path("vllm_gaudi/patches.py")
SAMPLER_REL = Path("vllm/v1/sample/ops/topk_topp_sampler.py")
LOGITSPROCS_REL = Path("vllm/v1/sample/logits_processor")
TORCH_UTILS_REL = Path("vllm/utils/torch_utils.py")
LOGITSPROCS_PKG = "vllm.v1.sample.logits_processor"

_SAMPLING_EPS = 1e-5  # vllm/sampling_params.py: below this temperature a request is greedy

# The vLLM modules hpu_input_batch.py and the logits-processor package import; stand-ins below.
_STUB_NAMES = (
    "vllm",
    "vllm.config",
    "vllm.exceptions",
    "vllm.logger",
    "vllm.logits_process",
    "vllm.lora",
    "vllm.lora.request",
    "vllm.multimodal",
    "vllm.multimodal.inputs",
    "vllm.platforms",
    "vllm.pooling_params",
    "vllm.sampling_params",
    "vllm.utils",
    "vllm.utils.collection_utils",
    "vllm.utils.math_utils",
    "vllm.utils.torch_utils",
    "vllm.v1",
    "vllm.v1.outputs",
    "vllm.v1.pool",
    "vllm.v1.pool.metadata",
    "vllm.v1.sample",
    "vllm.v1.sample.metadata",
    "vllm.v1.sample.thinking_budget_state",
    "vllm.v1.worker",
    "vllm.v1.worker.block_table",
    "vllm_gaudi",
    "vllm_gaudi.utils",
)


class SamplingType:
    GREEDY = 0
    RANDOM = 1
    RANDOM_SEED = 2


@dataclass
class SamplingParams:
    """The fields of vllm.SamplingParams that InputBatch.add_request and the built-in logits
    processors read."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    seed: Optional[int] = None
    logprobs: Optional[int] = None
    prompt_logprobs: Optional[int] = None
    allowed_token_ids: Optional[list[int]] = None
    bad_words_token_ids: Optional[list[list[int]]] = None
    logit_bias: Optional[dict[int, float]] = None
    min_tokens: int = 0
    stop_token_ids: list[int] = field(default_factory=list)
    eos_token_id: Optional[int] = None
    structured_outputs: Any = None
    extra_args: Optional[dict[str, Any]] = None

    @property
    def all_stop_token_ids(self) -> set[int]:
        # As vllm.SamplingParams: the stop token ids plus EOS.
        ids = set(self.stop_token_ids)
        if self.eos_token_id is not None:
            ids.add(self.eos_token_id)
        return ids

    @property
    def sampling_type(self) -> int:
        if self.temperature < _SAMPLING_EPS:
            return SamplingType.GREEDY
        return SamplingType.RANDOM if self.seed is None else SamplingType.RANDOM_SEED


class SamplingMetadata:
    """Records what InputBatch hands the sampler."""

    def __init__(self, **fields: Any):
        self.__dict__.update(fields)


class LogprobsTensors(NamedTuple):
    """vllm.v1.outputs.LogprobsTensors' fields."""

    logprob_token_ids: torch.Tensor
    logprobs: torch.Tensor
    selected_token_ranks: torch.Tensor


class _BlockTable:
    """MultiGroupBlockTable without the blocks: the sampling state does not touch it."""

    def __init__(self, **_: Any):
        pass

    def add_row(self, *_: Any) -> None:
        pass

    def swap_row(self, *_: Any) -> None:
        pass

    def move_row(self, *_: Any) -> None:
        pass


class _Placeholder:
    def __init__(self, *_: Any, **__: Any):
        pass


def _thinking_budget_state(reasoning_config: Any, *args: Any) -> Any:
    """As vllm.v1.sample.thinking_budget_state.maybe_create_thinking_budget_state_holder: None
    without a reasoning config; with one, the tree's real holder (vLLM imported for real, as the
    harness does before it builds a batch with a reasoning config)."""
    if reasoning_config is None:
        return None
    import vllm.v1.sample.thinking_budget_state as real
    holder = real.maybe_create_thinking_budget_state_holder(reasoning_config, *args)
    sync_batch = holder.sync_batch

    def sync(batch_update: Any) -> None:
        # The batch's moves carry the MoveDirectionality of the logits-processor package loaded
        # here; the holder compares them with vLLM's own (else a swap reads as a one-way move).
        if batch_update:
            batch_update = replace(batch_update, moved=[
                (i, j, real.MoveDirectionality[d.name]) for i, j, d in batch_update.moved])
        sync_batch(batch_update)

    holder.sync_batch = sync
    return holder


def _swap_dict_values(obj: dict, key1: Any, key2: Any) -> None:
    # As vllm.utils.collection_utils.swap_dict_values.
    v1, v2 = obj.get(key1), obj.get(key2)
    if v1 is not None:
        obj[key2] = v1
    else:
        obj.pop(key2, None)
    if v2 is not None:
        obj[key1] = v2
    else:
        obj.pop(key1, None)


def _top_level_defs(path: Path, names: set[str], class_name: Optional[str] = None) -> list[ast.stmt]:
    """The function definitions `names` at module level of `path` (or in its class
    `class_name`); an error naming the file when one is missing."""
    tree = lift.parse(path)
    body = tree.body
    if class_name is not None:
        cls = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == class_name), None)
        if cls is None:
            raise LookupError(f"{path}: no class {class_name}")
        body = cls.body
    found = [n for n in body if isinstance(n, ast.FunctionDef) and n.name in names]
    missing = names - {n.name for n in found}
    if missing:
        raise LookupError(f"{path}: no {', '.join(sorted(missing))} (vllm_gaudi changed; update the test)")
    return found


def _exec_defs(defs: list[ast.stmt], path: Path, namespace: dict) -> dict:
    # Annotations stay strings: they name runner types the stubs do not provide.
    code = compile(ast.Module(defs, []), str(path), "exec", flags=__future__.annotations.compiler_flag,
                   dont_inherit=True)
    exec(code, namespace)
    return namespace


class _ValidationError(ValueError):
    pass


def _is_self_call(stmt: ast.stmt, name: str) -> bool:
    node = stmt.value if isinstance(stmt, (ast.Expr, ast.Assign)) else None
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == name
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "self")


def _sample_tokens_reorder(path: Path) -> ast.FunctionDef:
    """``HPUModelRunner.sample_tokens``' statements from ``self._ensure_decodes_first(...)``
    up to ``pd_info = self._get_prompts_and_decodes(...)``, as a method
    ``_sample_tokens_reorder(self, scheduler_output)``."""
    (sample_tokens, ) = _top_level_defs(path, {"sample_tokens"}, "HPUModelRunner")
    body = sample_tokens.body
    start = next((i for i, s in enumerate(body) if _is_self_call(s, "_ensure_decodes_first")), None)
    end = next((i for i, s in enumerate(body) if _is_self_call(s, "_get_prompts_and_decodes")), None)
    if start is None or end is None or end <= start:
        raise LookupError(f"{path}: sample_tokens no longer reorders then calls _get_prompts_and_decodes "
                          "(the tree changed; update the test)")
    args = ast.arguments(posonlyargs=[], args=[ast.arg("self"), ast.arg("scheduler_output")], kwonlyargs=[],
                         kw_defaults=[], defaults=[])
    fn = ast.FunctionDef(name="_sample_tokens_reorder", args=args, body=body[start:end], decorator_list=[],
                         returns=None)
    if "type_params" in ast.FunctionDef._fields:
        fn.type_params = []
    fn.lineno, fn.col_offset = body[start].lineno, 0
    fn.end_lineno, fn.end_col_offset = body[end - 1].end_lineno, 0
    return ast.fix_missing_locations(fn)


class H2DRecorder:
    """The real async_h2d_copy / async_h2d_update on device "cpu", recording each update."""

    def __init__(self, utils_path: Path):
        ns = _exec_defs(_top_level_defs(utils_path, {"async_h2d_copy", "async_h2d_update"}), utils_path,
                        {"torch": torch})
        self._copy, self._update = ns["async_h2d_copy"], ns["async_h2d_update"]
        # (destination tensor, row indices) of every async_h2d_update since the last reset.
        self.updates: list[tuple[torch.Tensor, list[int]]] = []

    def async_h2d_copy(self, source, dest_tensor=None, dtype=None, device="cpu"):
        return self._copy(source, dest_tensor, dtype, device="cpu")

    def async_h2d_update(self, source, dest, indices, device="cpu"):
        self.updates.append((dest, list(indices)))
        return self._update(source, dest, indices, device="cpu")


def _logits_processor_package(root: Path, mods: dict[str, types.ModuleType]) -> None:
    """vllm.v1.sample.logits_processor for InputBatch: vLLM's real BatchUpdateBuilder,
    LogitsProcessors and MoveDirectionality (interface.py and state.py of `root`'s vllm tree,
    where it has one: a default-profile tree has logitsprocs-batch-updates applied, which
    records into them), else placeholders. The processor classes are never instantiated here
    (no request asks for them), so placeholders stand in for them."""
    package = mods["vllm.v1.sample.logits_processor"]
    for cls in ("AdapterLogitsProcessor", "LogitBiasLogitsProcessor", "MinPLogitsProcessor",
                "MinTokensLogitsProcessor"):
        setattr(package, cls, type(cls, (_Placeholder, ), {}))
    package_dir = root / "vllm/v1/sample/logits_processor"
    if not (package_dir / "state.py").is_file():
        if "gaudi-fixes logitsprocs-batch-updates" in (root / INPUT_BATCH_REL).read_text():
            raise LookupError(f"{root}: no vllm/ tree next to vllm_gaudi/; with logitsprocs-batch-updates applied, "
                              "InputBatch needs vLLM's logits_processor package (point the root at both trees)")
        package.BatchUpdateBuilder = package.LogitsProcessors = package.MoveDirectionality = _Placeholder
        return
    mods["vllm"].SamplingParams = SamplingParams  # interface.py: from vllm import SamplingParams
    package.__path__ = []
    for sub in ("interface", "state"):
        name = f"vllm.v1.sample.logits_processor.{sub}"
        module = mods[name] = types.ModuleType(name)
        sys.modules[name] = module  # state.py imports interface.py
        path = package_dir / f"{sub}.py"
        exec(compile(path.read_text(), str(path), "exec"), module.__dict__)
        for attr in ("BatchUpdateBuilder", "LogitsProcessors", "MoveDirectionality"):
            if hasattr(module, attr):
                setattr(package, attr, getattr(module, attr))


def _stub_modules(root: Path, h2d: H2DRecorder) -> dict[str, types.ModuleType]:
    mods = {name: types.ModuleType(name) for name in _STUB_NAMES}
    for name in _STUB_NAMES + (LOGITSPROCS_PKG, ):
        parent = name.rpartition(".")[0]
        if parent in mods:
            mods[parent].__path__ = []
    mods["vllm"].SamplingParams = SamplingParams
    mods["vllm.config"].VllmConfig = _Placeholder
    mods["vllm.exceptions"].VLLMValidationError = _ValidationError
    mods["vllm.logger"].init_logger = logging.getLogger
    mods["vllm.logits_process"].LogitsProcessor = object
    mods["vllm.lora.request"].LoRARequest = _Placeholder
    mods["vllm.multimodal.inputs"].MultiModalFeatureSpec = _Placeholder
    mods["vllm.platforms"].current_platform = types.SimpleNamespace(is_tpu=lambda: False)
    mods["vllm.pooling_params"].PoolingParams = _Placeholder
    mods["vllm.sampling_params"].SamplingParams = SamplingParams
    mods["vllm.sampling_params"].SamplingType = SamplingType
    mods["vllm.utils.collection_utils"].swap_dict_values = _swap_dict_values
    mods["vllm.utils.math_utils"].cdiv = lambda a, b: -(a // -b)
    torch_utils = root / TORCH_UTILS_REL
    if torch_utils.is_file():  # a root with only vllm_gaudi/ has none
        lifted = _exec_defs(_top_level_defs(torch_utils, {"async_tensor_h2d"}), torch_utils,
                            {"torch": torch, "np": np, "PIN_MEMORY": False,
                             "is_pin_memory_available": lambda: False})  # 0.32.0 asks a function
        mods["vllm.utils.torch_utils"].async_tensor_h2d = lifted["async_tensor_h2d"]
    mods["vllm.utils.torch_utils"].guard_cuda_initialization = contextlib.nullcontext
    mods["vllm.v1.outputs"].LogprobsTensors = LogprobsTensors
    mods["vllm.v1.pool.metadata"].PoolingMetadata = _Placeholder
    mods["vllm.v1.pool.metadata"].PoolingStates = _Placeholder
    mods["vllm.v1.sample.metadata"].SamplingMetadata = SamplingMetadata
    mods["vllm.v1.sample.thinking_budget_state"].maybe_create_thinking_budget_state_holder = _thinking_budget_state
    mods["vllm.v1.worker.block_table"].MultiGroupBlockTable = _BlockTable
    mods["vllm_gaudi.utils"].async_h2d_copy = h2d.async_h2d_copy
    mods["vllm_gaudi.utils"].async_h2d_update = h2d.async_h2d_update
    return mods


def _exec_module(name: str, path: Path, package: Optional[str] = None) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__file__ = str(path)
    if package is not None:
        module.__path__ = [str(path.parent)]
        module.__package__ = package
    sys.modules[name] = module  # dataclasses looks the module up by name
    exec(compile(path.read_text(), str(path), "exec"), module.__dict__)
    return module


@contextlib.contextmanager
def _installed(modules: dict[str, types.ModuleType], also: Iterable[str] = ()):
    """`modules` in sys.modules while the block runs; what was there before (under their names
    and `also`'s, which the block may set) afterwards."""
    saved = {n: sys.modules.get(n) for n in (*modules, *also)}
    sys.modules.update(modules)
    try:
        yield
    finally:
        for n, m in saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m


def load_input_batch(root: Path, h2d: H2DRecorder, name: str = "gaudi_fixes_hpu_input_batch") -> types.ModuleType:
    """Execute `root`'s hpu_input_batch.py as module `name` (left in sys.modules), with the
    stubs in sys.modules only while it runs; vLLM's BatchUpdateBuilder, LogitsProcessors and
    MoveDirectionality are the tree's own where it has them (``_logits_processor_package``)."""
    mods = _stub_modules(root, h2d)
    mods[LOGITSPROCS_PKG] = types.ModuleType(LOGITSPROCS_PKG)
    with _installed(mods, also=(f"{LOGITSPROCS_PKG}.{sub}" for sub in ("interface", "state"))):
        _logits_processor_package(root, mods)
        return _exec_module(name, root / INPUT_BATCH_REL)


@dataclass
class Loaded:
    input_batch: types.ModuleType  # hpu_input_batch.py of the tree
    logitsprocs: types.ModuleType  # vllm.v1.sample.logits_processor of the tree
    modules: dict[str, types.ModuleType]  # the stubs and the package, for code that imports late

    def build_logitsprocs(self, *args: Any) -> Any:
        """The tree's build_logitsprocs (it imports vllm.platforms when called)."""
        with _installed(self.modules):
            return self.logitsprocs.build_logitsprocs(*args)


def load(root: Path, h2d: H2DRecorder, name: str = "gaudi_fixes_hpu_input_batch") -> Loaded:
    """Execute the tree's whole logits-processor package, then its hpu_input_batch.py (as module
    `name`, left in sys.modules), with the stubs in sys.modules only while they run."""
    pkg_dir = root / LOGITSPROCS_REL
    modules = _stub_modules(root, h2d)
    with _installed(modules):
        for sub in ("interface", "state", "builtin"):
            _exec_module(f"{LOGITSPROCS_PKG}.{sub}", pkg_dir / f"{sub}.py")
        logitsprocs = _exec_module(LOGITSPROCS_PKG, pkg_dir / "__init__.py", package=LOGITSPROCS_PKG)
        for sub in ("interface", "state", "builtin"):
            setattr(logitsprocs, sub, sys.modules[f"{LOGITSPROCS_PKG}.{sub}"])
        modules.update({n: sys.modules[n] for n in sys.modules if n.startswith(LOGITSPROCS_PKG)})
        input_batch = _exec_module(name, root / INPUT_BATCH_REL)
    return Loaded(input_batch, logitsprocs, modules)


@dataclass
class SchedulerOutput:
    """The fields of vLLM's SchedulerOutput that the reordering reads."""

    num_scheduled_tokens: dict[str, int]
    scheduled_spec_decode_tokens: dict[str, list[int]] = field(default_factory=dict)


class Runner:
    """The runner methods that reorder the batch and build sampling metadata, lifted from the
    real HPUModelRunner (plus `extra` ones; with `reorder`, ``_sample_tokens_reorder``: the
    statements of ``sample_tokens`` that reorder); everything else a runner has is absent."""

    def __init__(self, root: Path, input_batch: Any, extra: Iterable[str] = (), reorder: bool = False):
        path = root / RUNNER_REL
        names = {"_ensure_decodes_first", "_is_prompt", "_generate_req_id_output_token_ids_lst", "_prepare_sampling"}
        names |= set(extra)
        functions = _exec_defs(_top_level_defs(path, {"ensure_multi_token_decodes_last"}), path,
                               {"Mapping": Mapping})
        defs = _top_level_defs(path, names, "HPUModelRunner")
        if reorder:
            defs.append(_sample_tokens_reorder(path))
            names.add("_sample_tokens_reorder")
        methods = _exec_defs(defs, path, {"Optional": Optional, "Union": Union, "torch": torch,
                                          "LogprobsTensors": LogprobsTensors, **functions})
        for method_name in names:
            setattr(self, method_name, types.MethodType(methods[method_name], self))
        self.ensure_multi_token_decodes_last = functions["ensure_multi_token_decodes_last"]
        self.input_batch = input_batch
        self.vllm_config = types.SimpleNamespace(speculative_config=None)
        # req_id -> CachedRequestState, as HPUModelRunner.requests.
        self.requests: dict[str, Any] = {}

    def is_decoder_only(self, req_id: str) -> bool:
        return False



def runner_class(path: Path) -> ast.ClassDef:
    tree = lift.parse(path)
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "HPUModelRunner")


def tail_of_sample_tokens(cls: ast.ClassDef, path: Path) -> list[ast.stmt]:
    """``sample_tokens`` from ``if self.use_async_scheduling or self.use_structured_output…:`` (a
    fix may add to that test) to the loop that extends ``req_state.output_token_ids``: what the
    runner hands back."""
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "sample_tokens")
    where = f"{cls.name}.sample_tokens"
    start = fn.body.index(lift.find_statement(fn, path=path, where=where,
                                              test="self.use_async_scheduling or self.use_structured_output"))
    end = fn.body.index(lift.find_statement(fn, path=path, where=where, kind=ast.For,
                                            contains="postprocessed_sampled_token_ids[:num_reqs]"))
    if end < start:
        raise LookupError(f"{path}: {where}: the loop over postprocessed_sampled_token_ids comes before "
                          "the async / structured-output test (vllm_gaudi changed)")
    return fn.body[start:end + 1]


def load_hpu_gather_logprobs(root: Path):
    """vllm_gaudi's ``_hpu_gather_logprobs`` (``vllm_gaudi/patches.py``), the ``Sampler.gather_logprobs``
    vllm_gaudi installs, lifted out of the file; the two vLLM modules it imports when called are
    stubbed for the call."""
    path = root / PATCHES_REL
    fn = _exec_defs(_top_level_defs(path, {"_hpu_gather_logprobs"}), path, {"torch": torch})["_hpu_gather_logprobs"]
    outputs = types.ModuleType("vllm.v1.outputs")
    outputs.LogprobsTensors = LogprobsTensors
    sampler = types.ModuleType("vllm.v1.sample.sampler")
    # As vllm.v1.sample.ops.logprobs.batched_count_greater_than.
    sampler.batched_count_greater_than = lambda x, values: (x >= values).sum(-1)
    stubs = {"vllm": types.ModuleType("vllm"), "vllm.v1": types.ModuleType("vllm.v1"),
             "vllm.v1.sample": types.ModuleType("vllm.v1.sample"), "vllm.v1.outputs": outputs,
             "vllm.v1.sample.sampler": sampler}
    for name, mod in stubs.items():
        if name != "vllm.v1.outputs" and name != "vllm.v1.sample.sampler":
            mod.__path__ = []
    stubs["vllm"].v1 = stubs["vllm.v1"]
    stubs["vllm.v1"].sample = stubs["vllm.v1.sample"]
    stubs["vllm.v1"].outputs = outputs
    stubs["vllm.v1.sample"].sampler = sampler

    def gather(logprobs: torch.Tensor, num_logprobs: int, token_ids: torch.Tensor) -> LogprobsTensors:
        with _installed(stubs):
            return fn(logprobs, num_logprobs, token_ids)

    return gather


# vLLM's topk_topp_sampler.py, on an HPU-like platform.

_SAMPLER_STUB_NAMES = (
    "vllm",
    "vllm.envs",
    "vllm._aiter_ops",
    "vllm.config",
    "vllm.config.model",
    "vllm.logger",
    "vllm.platforms",
    "vllm.platforms.interface",
    "vllm.triton_utils",
)


class _CpuArchEnum(enum.Enum):
    X86 = enum.auto()
    ARM = enum.auto()
    POWERPC = enum.auto()
    RISCV = enum.auto()
    OTHER = enum.auto()


class _HpuLikePlatform:
    """Not CUDA, CPU, XPU or ROCm: TopKTopPSampler picks forward_native, the branch Gaudi runs."""

    simple_compile_backend = "eager"

    def is_cuda(self) -> bool:
        return False

    def is_cuda_alike(self) -> bool:
        return False

    def is_cpu(self) -> bool:
        return False

    def is_xpu(self) -> bool:
        return False

    def is_rocm(self) -> bool:
        return False


class _Logger(logging.LoggerAdapter):
    def info_once(self, msg, *args, **kwargs):
        kwargs.pop("scope", None)
        self.info(msg, *args, **kwargs)

    def warning_once(self, msg, *args, **kwargs):
        kwargs.pop("scope", None)
        self.warning(msg, *args, **kwargs)

    def debug_once(self, msg, *args, **kwargs):
        kwargs.pop("scope", None)
        self.debug(msg, *args, **kwargs)


def _sampler_stub_modules() -> dict[str, types.ModuleType]:
    mods = {name: types.ModuleType(name) for name in _SAMPLER_STUB_NAMES}
    mods["vllm"].__path__ = []
    mods["vllm.config"].__path__ = []
    envs = mods["vllm.envs"]
    envs.VLLM_USE_FLASHINFER_SAMPLER = False
    envs.VLLM_XPU_USE_SAMPLER_KERNEL = False
    envs.is_set = lambda name: False
    mods["vllm"].envs = envs
    mods["vllm._aiter_ops"].rocm_aiter_ops = types.SimpleNamespace(is_enabled=lambda: False)
    model = mods["vllm.config.model"]
    model.LogprobsMode = str
    model.PROCESSED_LOGPROBS_MODES = ("processed_logits", "processed_logprobs")
    mods["vllm.config"].model = model
    mods["vllm.logger"].init_logger = lambda name: _Logger(logging.getLogger(name), {})
    platforms = mods["vllm.platforms"]
    platforms.CpuArchEnum = _CpuArchEnum
    platforms.current_platform = _HpuLikePlatform()
    platforms.__path__ = []
    # vLLM >= 0.33 imports DeviceCapability for its FlashInfer check (unused off CUDA).
    mods["vllm.platforms.interface"].DeviceCapability = tuple
    mods["vllm.triton_utils"].HAS_TRITON = False
    return mods

def load_sampler_source(source: str, name: str, path: Path) -> types.ModuleType:
    """Execute a topk_topp_sampler.py source text (read from `path`) as module `name` (left in
    sys.modules: torch.compile resolves globals through it), with the stubs in sys.modules only
    while it runs."""
    with _installed(_sampler_stub_modules()):
        module = types.ModuleType(name)
        module.__file__ = str(path)
        sys.modules[name] = module
        exec(compile(source, f"{path} <{name}>", "exec"), module.__dict__)
    return module


def load_sampler(root: Path, name: str = "gaudi_fixes_topk_topp_sampler") -> types.ModuleType:
    """Execute `root`'s vllm/v1/sample/ops/topk_topp_sampler.py as module `name`."""
    path = root / SAMPLER_REL
    return load_sampler_source(path.read_text(), name, path)
