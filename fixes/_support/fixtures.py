"""pytest fixtures of the harness (harness.py), for every fix test that drives the runner.

``root``: the tree under test, ``$GAUDI_FIXES_ROOT`` (holding ``vllm/`` and ``vllm_gaudi/``); the
test is skipped, with the reason, when it is unset or lacks either tree. ``mode``: ``sync`` and
``async`` scheduling, each test run once per mode. ``fixes/conftest.py`` offers them to a checkout's
pytest; ``gaudi-fixes test`` copies only ``_support/`` beside a fix's tests, so a test imports them
from here too (``from fixtures import mode, root``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT_ENV = "GAUDI_FIXES_ROOT"
NEEDS = ("vllm_gaudi/v1/worker/hpu_model_runner.py", "vllm_gaudi/v1/worker/hpu_input_batch.py",
         "vllm/v1/core/sched/output.py", "vllm/sampling_params.py")


@pytest.fixture(scope="module")
def root() -> Path:
    value = os.environ.get(ROOT_ENV)
    if not value:
        pytest.skip(f"{ROOT_ENV} is not set: point it at a directory holding vllm/ and vllm_gaudi/")
    path = Path(value)
    missing = [rel for rel in NEEDS if not (path / rel).is_file()]
    if missing:
        pytest.skip(f"{path} lacks {', '.join(missing)}: needs a vllm and a vllm_gaudi tree")
    return path


@pytest.fixture(scope="module", params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> str:
    return request.param
