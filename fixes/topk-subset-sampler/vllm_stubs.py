"""Load vLLM's vllm/v1/sample/ops/topk_topp_sampler.py outside vLLM.

The file imports a few vLLM modules; small stubs stand in for them, with an HPU-like
platform (not CUDA, CPU, XPU or ROCm, no Triton) so TopKTopPSampler takes forward_native,
the branch Gaudi runs. Shared by the fix's pytest and scripts/bench-topk-subset.py.
"""

from __future__ import annotations

import enum
import logging
import sys
import types
from pathlib import Path

_STUB_NAMES = (
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
    """Not CUDA, CPU, XPU or ROCm: TopKTopPSampler picks forward_native."""

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


def _stub_modules() -> dict[str, types.ModuleType]:
    mods = {name: types.ModuleType(name) for name in _STUB_NAMES}
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


def load_sampler(source: str, name: str, path: Path) -> types.ModuleType:
    """Execute a topk_topp_sampler.py source text (read from `path`) as module `name`,
    with the stubs in sys.modules only while it runs."""
    saved = {n: sys.modules.get(n) for n in _STUB_NAMES}
    sys.modules.update(_stub_modules())
    try:
        module = types.ModuleType(name)
        module.__file__ = str(path)
        # Importable by name: torch.compile resolves globals through sys.modules.
        sys.modules[name] = module
        exec(compile(source, f"{path} <{name}>", "exec"), module.__dict__)
    finally:
        for n, m in saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m
    return module
