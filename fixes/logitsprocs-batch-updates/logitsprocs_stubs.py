"""Load vllm_gaudi's ``v1/worker/hpu_input_batch.py`` with vLLM's REAL logits-processor package,
and the runner lines that drive it, outside vLLM and without an HPU.

``$GAUDI_FIXES_ROOT`` holds ``vllm/`` and ``vllm_gaudi/``. The package
``vllm/v1/sample/logits_processor/`` (``interface.py``, ``state.py``, ``builtin.py``,
``__init__.py`` with ``build_logitsprocs`` and ``AdapterLogitsProcessor``) is executed from the
tree, so ``BatchUpdateBuilder``, ``MoveDirectionality`` and the min_p / logit_bias / min_tokens
processors are vLLM's own. The few vLLM modules those files and ``InputBatch`` import besides
are small stubs here; ``async_tensor_h2d`` (vllm/utils/torch_utils.py) and ``async_h2d_copy`` /
``async_h2d_update`` (vllm_gaudi/utils.py) are the real functions lifted out of their files and
run on device "cpu".

The runner's reordering and sampling-metadata functions are lifted from the real
``hpu_model_runner.py``: ``ensure_multi_token_decodes_last``, ``HPUModelRunner._ensure_decodes_first``,
``_is_prompt``, ``_generate_req_id_output_token_ids_lst``, ``_prepare_sampling``, and the statements
of ``sample_tokens`` from its ``self._ensure_decodes_first(scheduler_output)`` up to
``pd_info = self._get_prompts_and_decodes(...)`` (the reorders and whatever the tree does right
after them), so a test drives the runner's own sequence rather than a paraphrase of it.
"""

from __future__ import annotations

import __future__
import ast
import contextlib
import logging
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Union

import numpy as np
import torch

INPUT_BATCH_REL = Path("vllm_gaudi/v1/worker/hpu_input_batch.py")
RUNNER_REL = Path("vllm_gaudi/v1/worker/hpu_model_runner.py")
UTILS_REL = Path("vllm_gaudi/utils.py")
LOGITSPROCS_REL = Path("vllm/v1/sample/logits_processor")
TORCH_UTILS_REL = Path("vllm/utils/torch_utils.py")
LOGITSPROCS_PKG = "vllm.v1.sample.logits_processor"

_SAMPLING_EPS = 1e-5  # vllm/sampling_params.py: below this temperature a request is greedy

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


class _BlockTable:
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


class _ValidationError(ValueError):
    pass


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
    tree = ast.parse(path.read_text(), str(path))
    body = tree.body
    if class_name is not None:
        cls = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == class_name), None)
        if cls is None:
            raise LookupError(f"{path}: no class {class_name}")
        body = cls.body
    found = [n for n in body if isinstance(n, ast.FunctionDef) and n.name in names]
    missing = names - {n.name for n in found}
    if missing:
        raise LookupError(f"{path}: no {', '.join(sorted(missing))} (the tree changed; update the test)")
    return found


def _exec_defs(defs: list[ast.stmt], path: Path, namespace: dict) -> dict:
    code = compile(ast.Module(defs, []), str(path), "exec", flags=__future__.annotations.compiler_flag,
                   dont_inherit=True)
    exec(code, namespace)
    return namespace


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
    """The real async_h2d_copy / async_h2d_update on device "cpu"."""

    def __init__(self, utils_path: Path):
        ns = _exec_defs(_top_level_defs(utils_path, {"async_h2d_copy", "async_h2d_update"}), utils_path,
                        {"torch": torch})
        self._copy, self._update = ns["async_h2d_copy"], ns["async_h2d_update"]

    def async_h2d_copy(self, source, dest_tensor=None, dtype=None, device="cpu"):
        return self._copy(source, dest_tensor, dtype, device="cpu")

    def async_h2d_update(self, source, dest, indices, device="cpu"):
        return self._update(source, dest, indices, device="cpu")


def _stub_modules(root: Path, h2d: H2DRecorder) -> dict[str, types.ModuleType]:
    mods = {name: types.ModuleType(name) for name in _STUB_NAMES}
    for name in _STUB_NAMES + (LOGITSPROCS_PKG, ):
        parent = name.rpartition(".")[0]
        if parent in mods:
            mods[parent].__path__ = []
    torch_utils = root / TORCH_UTILS_REL
    lifted = _exec_defs(_top_level_defs(torch_utils, {"async_tensor_h2d"}), torch_utils,
                        {"torch": torch, "np": np, "PIN_MEMORY": False,
                         "is_pin_memory_available": lambda: False})  # 0.32.0 asks a function
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
    mods["vllm.utils.torch_utils"].async_tensor_h2d = lifted["async_tensor_h2d"]
    mods["vllm.utils.torch_utils"].guard_cuda_initialization = contextlib.nullcontext
    mods["vllm.v1.outputs"].LogprobsTensors = _Placeholder
    mods["vllm.v1.pool.metadata"].PoolingMetadata = _Placeholder
    mods["vllm.v1.pool.metadata"].PoolingStates = _Placeholder
    mods["vllm.v1.sample.metadata"].SamplingMetadata = SamplingMetadata
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
    sys.modules[name] = module
    exec(compile(path.read_text(), str(path), "exec"), module.__dict__)
    return module


@contextlib.contextmanager
def _installed(modules: dict[str, types.ModuleType]):
    """`modules` in sys.modules while the block runs; what was there before afterwards."""
    saved = {n: sys.modules.get(n) for n in modules}
    sys.modules.update(modules)
    try:
        yield
    finally:
        for n, m in saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m


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
    """Execute the tree's logits-processor package, then its hpu_input_batch.py (as module
    `name`, left in sys.modules: dataclasses looks it up by name), with the stubs in
    sys.modules only while they run."""
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
    real HPUModelRunner; everything else a runner has is absent."""

    def __init__(self, root: Path, input_batch: Any):
        path = root / RUNNER_REL
        names = {"_ensure_decodes_first", "_is_prompt", "_generate_req_id_output_token_ids_lst", "_prepare_sampling"}
        functions = _exec_defs(_top_level_defs(path, {"ensure_multi_token_decodes_last"}), path,
                               {"Mapping": Mapping})
        methods = _exec_defs(_top_level_defs(path, names, "HPUModelRunner") + [_sample_tokens_reorder(path)], path,
                             {"Optional": Optional, "Union": Union, **functions})
        for method_name in names | {"_sample_tokens_reorder"}:
            setattr(self, method_name, types.MethodType(methods[method_name], self))
        self.ensure_multi_token_decodes_last = functions["ensure_multi_token_decodes_last"]
        self.input_batch = input_batch
        self.vllm_config = types.SimpleNamespace(speculative_config=None)
        self.requests: dict[str, Any] = {}

    def is_decoder_only(self, req_id: str) -> bool:
        return False
