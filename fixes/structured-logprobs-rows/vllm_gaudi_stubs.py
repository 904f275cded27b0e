"""Load vllm_gaudi's ``v1/worker/hpu_input_batch.py`` and the runner lines that drive it,
outside vLLM and without an HPU.

``InputBatch`` imports a dozen vLLM modules; small stubs stand in for them while the real
file runs. The host-to-device helpers are the REAL ``async_h2d_copy`` / ``async_h2d_update``,
lifted out of ``vllm_gaudi/utils.py`` (which itself imports habana_frameworks) and called
with device "cpu", so the "device" tensors are separate CPU tensors that change only when
those helpers copy into them — exactly the state the sampler sees on an HPU.

The runner functions that reorder the batch and build the sampler's metadata
(``ensure_multi_token_decodes_last`` and ``HPUModelRunner._ensure_decodes_first``,
``_is_prompt``, ``_generate_req_id_output_token_ids_lst``, ``_prepare_sampling``) are lifted
out of the real ``hpu_model_runner.py`` the same way, so a test drives the runner's own
sequence rather than a paraphrase of it.
"""

from __future__ import annotations

import __future__
import ast
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Union

import torch

INPUT_BATCH_REL = Path("vllm_gaudi/v1/worker/hpu_input_batch.py")
RUNNER_REL = Path("vllm_gaudi/v1/worker/hpu_model_runner.py")
UTILS_REL = Path("vllm_gaudi/utils.py")

_SAMPLING_EPS = 1e-5  # vllm/sampling_params.py: below this temperature a request is greedy

_STUB_NAMES = (
    "vllm",
    "vllm.lora",
    "vllm.lora.request",
    "vllm.multimodal",
    "vllm.multimodal.inputs",
    "vllm.pooling_params",
    "vllm.sampling_params",
    "vllm.utils",
    "vllm.utils.collection_utils",
    "vllm.utils.math_utils",
    "vllm.v1",
    "vllm.v1.outputs",
    "vllm.v1.pool",
    "vllm.v1.pool.metadata",
    "vllm.v1.sample",
    "vllm.v1.sample.metadata",
    "vllm.v1.sample.logits_processor",
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
    """The fields of vllm.SamplingParams that InputBatch.add_request reads."""

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

    @property
    def sampling_type(self) -> int:
        # As vllm.SamplingParams.sampling_type.
        if self.temperature < _SAMPLING_EPS:
            return SamplingType.GREEDY
        return SamplingType.RANDOM if self.seed is None else SamplingType.RANDOM_SEED


class SamplingMetadata:
    """Records what InputBatch hands the sampler."""

    def __init__(self, **fields: Any):
        self.__dict__.update(fields)


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
        raise LookupError(f"{path}: no {', '.join(sorted(missing))} (vllm_gaudi changed; update the test)")
    return found


def _exec_defs(defs: list[ast.stmt], path: Path, namespace: dict) -> dict:
    # Annotations stay strings: they name runner types the stubs do not provide.
    code = compile(ast.Module(defs, []), str(path), "exec", flags=__future__.annotations.compiler_flag,
                   dont_inherit=True)
    exec(code, namespace)
    return namespace


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


def _stub_modules(h2d: H2DRecorder) -> dict[str, types.ModuleType]:
    mods = {name: types.ModuleType(name) for name in _STUB_NAMES}
    for name in _STUB_NAMES:
        if any(other.startswith(name + ".") for other in _STUB_NAMES):
            mods[name].__path__ = []
    mods["vllm.lora.request"].LoRARequest = _Placeholder
    mods["vllm.multimodal.inputs"].MultiModalFeatureSpec = _Placeholder
    mods["vllm.pooling_params"].PoolingParams = _Placeholder
    mods["vllm.sampling_params"].SamplingParams = SamplingParams
    mods["vllm.sampling_params"].SamplingType = SamplingType
    mods["vllm.utils.collection_utils"].swap_dict_values = _swap_dict_values
    mods["vllm.utils.math_utils"].cdiv = lambda a, b: -(a // -b)
    mods["vllm.v1.outputs"].LogprobsTensors = _Placeholder
    mods["vllm.v1.pool.metadata"].PoolingMetadata = _Placeholder
    mods["vllm.v1.pool.metadata"].PoolingStates = _Placeholder
    mods["vllm.v1.sample.metadata"].SamplingMetadata = SamplingMetadata
    mods["vllm.v1.worker.block_table"].MultiGroupBlockTable = _BlockTable
    mods["vllm_gaudi.utils"].async_h2d_copy = h2d.async_h2d_copy
    mods["vllm_gaudi.utils"].async_h2d_update = h2d.async_h2d_update
    return mods


def load_input_batch(root: Path, h2d: H2DRecorder, name: str = "gaudi_fixes_hpu_input_batch") -> types.ModuleType:
    """Execute `root`'s hpu_input_batch.py as module `name`, with the stubs in sys.modules
    only while it runs."""
    path = root / INPUT_BATCH_REL
    stub_names = _STUB_NAMES + tuple(f"vllm.v1.sample.logits_processor.{sub}" for sub in ("interface", "state"))
    saved = {n: sys.modules.get(n) for n in stub_names}
    mods = _stub_modules(h2d)
    sys.modules.update(mods)
    try:
        _logits_processor_package(root, mods)
        module = types.ModuleType(name)
        module.__file__ = str(path)
        sys.modules[name] = module  # dataclasses looks the module up by name
        exec(compile(path.read_text(), str(path), "exec"), module.__dict__)
    finally:
        for n, m in saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m
    return module


@dataclass
class SchedulerOutput:
    """The two fields of vLLM's SchedulerOutput that the reordering reads."""

    num_scheduled_tokens: dict[str, int]
    scheduled_spec_decode_tokens: dict[str, list[int]] = field(default_factory=dict)


class Runner:
    """The runner methods that reorder the batch and build sampling metadata, lifted from the
    real HPUModelRunner; everything else a runner has is absent."""

    def __init__(self, root: Path, input_batch: Any):
        path = root / RUNNER_REL
        names = {"_ensure_decodes_first", "_is_prompt", "_generate_req_id_output_token_ids_lst", "_prepare_sampling"}
        methods = _exec_defs(_top_level_defs(path, names, "HPUModelRunner"), path,
                             {"Optional": Optional, "Union": Union})
        for method_name in names:
            setattr(self, method_name, types.MethodType(methods[method_name], self))
        functions = _exec_defs(_top_level_defs(path, {"ensure_multi_token_decodes_last"}), path,
                               {"Mapping": Mapping})
        self.ensure_multi_token_decodes_last = functions["ensure_multi_token_decodes_last"]
        self.input_batch = input_batch
        # req_id -> CachedRequestState, as HPUModelRunner.requests.
        self.requests: dict[str, Any] = {}

    def is_decoder_only(self, req_id: str) -> bool:
        return False
