"""Unit tests of ``fixes/_support/lift.py``'s statement finding (``find_statement``) on small
made-up functions: a statement is found by its ``if`` test when a condition was added to it, and a
lookup that finds none or several says where and what. Run by scripts/test.sh (no tree needed):
``python -m pytest -q tests/python``."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixes" / "_support"))
import lift  # noqa: E402

PATH = Path("vllm_gaudi/v1/worker/hpu_model_runner.py")

SOURCE = '''
def sample_tokens(self):
    num_reqs = num_decodes + num_prefills
    if num_decodes > 0:
        if self.use_structured_output:
            apply(self.rejection_sampler)
        else:
            sample()
    if self.use_structured_output:
        join(logits_combined)
    if self.use_async_scheduling or self.use_structured_output:
        hand_back()
'''


def fn(source: str = SOURCE) -> ast.FunctionDef:
    return ast.parse(source).body[0]


def added(old: str, new: str) -> ast.FunctionDef:
    """SOURCE with `old` (once) replaced by `new`: a fix's edit."""
    assert SOURCE.count(old) == 1
    return fn(SOURCE.replace(old, new))


def find(scope, **lookup) -> ast.stmt:
    return lift.find_statement(scope, path=PATH, **lookup)


def test_exact_test_found():
    stmt = find(fn(), test="self.use_structured_output", contains="logits_combined")
    assert stmt.lineno == 9


@pytest.mark.parametrize("new", [
    "if self.use_structured_output and spec is None:\n        join",
    "if spec is None and self.use_structured_output:\n        join",
    "if self.use_structured_output and (spec is None and ready):\n        join",
])
def test_found_under_an_added_conjunct(new):
    tree = added("if self.use_structured_output:\n        join", new)
    stmt = find(tree, test="self.use_structured_output", contains="logits_combined")
    assert "join(logits_combined)" in ast.unparse(stmt)


def test_condition_added_inside_a_disjunct():
    tree = added("self.use_async_scheduling or self.use_structured_output:",
                 "self.use_async_scheduling or (self.use_structured_output and spec is None):")
    assert "hand_back()" in ast.unparse(find(tree, test="self.use_async_scheduling or self.use_structured_output"))


def test_a_different_test_is_not_a_match():
    tree = added("if self.use_structured_output:\n        join", "if self.use_structured_output or x:\n        join")
    with pytest.raises(lift.NotFound) as err:
        find(tree, test="self.use_structured_output", contains="logits_combined")
    # the changed block is named first: it holds the text and shares the condition
    assert "closest there: line 9 `if self.use_structured_output or x:`" in str(err.value)


def test_nested_statement_found_in_its_block():
    tree = fn()
    decodes = find(tree, test="num_decodes > 0")
    stmt = find(decodes, test="self.use_structured_output", contains="rejection_sampler")
    assert stmt.lineno == 5
    assert find(tree, nested=True, test="self.use_structured_output", contains="rejection_sampler") is stmt


def test_by_text_and_kind():
    stmt = find(fn(), kind=ast.Assign, contains="num_reqs = num_decodes + num_prefills")
    assert stmt.lineno == 3


def test_not_found_names_file_function_and_what_is_there():
    tree = added("if self.use_structured_output:\n        join", "if self.structured:\n        join")
    with pytest.raises(lift.NotFound) as err:
        find(tree, test="self.use_structured_output", contains="logits_combined")
    message = str(err.value)
    assert str(PATH) in message and "sample_tokens" in message
    assert "testing `self.use_structured_output`" in message and "'logits_combined'" in message
    assert "line 9 `if self.structured:`" in message  # what upstream has instead
    assert isinstance(err.value, LookupError)


def test_two_matches_are_an_error():
    with pytest.raises(lift.NotFound) as err:
        find(fn(), nested=True, test="self.use_structured_output")
    message = str(err.value)
    assert "sample_tokens: 2 statements match" in message and "line 5" in message and "line 9" in message


INIT = '''
def __init__(self, config):
    self.sampler_kind = config.kind
    if config.spec:
        self.rejection_sampler = RejectionSampler(self.sampler)
    self.sampler = Sampler(logprobs_mode=config.mode)
    sampler = self.sampler
'''


def test_an_assignment_is_found_by_its_target():
    """By target, not text: ``sampler = self.sampler`` and ``RejectionSampler(self.sampler)`` hold
    the text but assign something else."""
    stmt = lift.find_statement(fn(INIT), path=PATH, target="self.sampler", nested=True)
    assert ast.unparse(stmt) == "self.sampler = Sampler(logprobs_mode=config.mode)"
    with pytest.raises(lift.NotFound, match="no Assign statement assigning self.rejection_sampler and containing 'Sampler\\('"):
        lift.find_statement(fn(INIT), path=PATH, target="self.rejection_sampler", contains="Sampler(")
