"""The aten ops a fix adds on the device path, held against an allowlist with evidence that Gaudi
compiles them (a fix's ``device_ops.txt``; topk-subset-sampler's is the first, its header says the
format and where the evidence comes from).

- ``load_allowlist(path)``: ``op  input-dtypes  evidence`` per line, ``#`` comments; an entry's
  evidence names a gaudi-pytorch-bridge or vllm-gaudi file:line, or is ``covered-by
  <fix>/device_ops.txt:<line> ...``: that entry (same op, other input dtypes; its evidence quoted)
  (its dtypes are not proven by it); or is ``unsupported: ...`` with the bridge file:line that
  shows Gaudi does not run the op with those dtypes (kept so the audit names it: ``classify``
  fails on it). An entry without evidence (``unproven: ...``) is refused. Host syncs and
  data-dependent shapes can never be listed.
- ``OpRecorder``: every aten op dispatched while it is active, with its input tensors' dtypes;
  with ``device=`` (the tensors that stand for device tensors), only the ops on the device path:
  an op with a device input, or a factory whose source line names a device (``device=``). The
  rest (index built on the host from host lists, as ``num_draft_tokens``) is kept apart in
  ``host_ops``; a host tensor copied with ``.to(device)`` is a device tensor from then on.
- ``classify(seen, allowed, name)``: the failures of an op stream (host syncs, data-dependent
  shapes, ops not in the allowlist, ops listed as unsupported).
"""

from __future__ import annotations

import linecache
import re
import sys
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

import torch
import torch.utils._python_dispatch
import torch.utils._pytree

# Read a device value on the host (a sync on every decode step): refused even if listed.
HOST_SYNC_OPS = frozenset({"aten._local_scalar_dense", "aten.is_nonzero", "aten.item", "aten.equal"})
# Output shape depends on the data (no static graph): refused even if listed.
DATA_DEPENDENT_OPS = frozenset({
    "aten.nonzero", "aten.argwhere", "aten.masked_select", "aten.unique", "aten._unique", "aten._unique2",
    "aten.unique_dim", "aten.unique_consecutive", "aten.unique_dim_consecutive", "aten.repeat_interleave",
    "aten.bincount", "aten.histc",
})
# An allowlist entry's evidence names the bridge's or vllm-gaudi's file and line ...
_EVIDENCE = re.compile(r"(HabanaAI/gaudi-pytorch-bridge|vllm-project/vllm-gaudi)\S* \S+:\d+")
# ... or another allowlist's entry for the same op that does.
_COVERED_BY = re.compile(r"^covered-by (\S+/device_ops\.txt):(\d+) \S")
FIXES_DIR = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class AllowedOp:
    op: str  # e.g. aten.topk.default
    dtypes: str  # input tensor dtypes, comma-separated; "->T" for an op without tensor inputs
    evidence: str
    line: int


def _parse(path: Path) -> dict[tuple[str, str], AllowedOp]:
    entries: dict[tuple[str, str], AllowedOp] = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split(None, 2)
        where = f"{path.name}:{number}"
        if len(fields) < 3:
            raise AssertionError(f"{where}: want `op dtypes evidence`, got {raw!r}")
        op, dtypes, evidence = fields
        packet = op.rsplit(".", 1)[0]
        if packet in HOST_SYNC_OPS or packet in DATA_DEPENDENT_OPS:
            raise AssertionError(f"{where}: {op} syncs with the host or has a data-dependent shape; it cannot be allowed")
        if (op, dtypes) in entries:
            raise AssertionError(f"{where}: {op} {dtypes} listed twice (first at line {entries[op, dtypes].line})")
        entries[op, dtypes] = AllowedOp(op, dtypes, evidence, number)
    return entries


UNSUPPORTED = "unsupported:"


def load_allowlist(path: Path) -> dict[tuple[str, str], AllowedOp]:
    """`op dtypes evidence...` per line; # comments. Errors name the file and line. An entry
    whose evidence starts with ``unsupported:`` (and names the bridge's file:line that says so)
    is kept for ``classify`` to fail on."""
    entries = _parse(path)
    for (op, dtypes), entry in entries.items():
        where = f"{path.name}:{entry.line}"
        if entry.evidence.startswith(UNSUPPORTED):
            if not _EVIDENCE.search(entry.evidence):
                raise AssertionError(f"{where}: {op} {dtypes}: `unsupported:` must name the gaudi-pytorch-bridge or "
                                     "vllm-gaudi file:line that shows it")
            continue
        covered = _COVERED_BY.match(entry.evidence)
        if covered:
            # The entry quotes the other's evidence (`gaudi-fixes test` copies one fix's folder only);
            # in a checkout the other entry must be there.
            other_path = FIXES_DIR / covered.group(1)
            other = ({e.line: e for e in _parse(other_path).values()}.get(int(covered.group(2)))
                     if other_path.is_file() else AllowedOp(op, "", entry.evidence, 0))
            if other is None or other.op != op or not _EVIDENCE.search(other.evidence) or (
                    other.evidence not in entry.evidence and other_path.is_file()):
                raise AssertionError(f"{where}: {op} {dtypes}: {covered.group(1)}:{covered.group(2)} is not an "
                                     f"entry for {op} with gaudi-pytorch-bridge or vllm-gaudi evidence")
        elif not _EVIDENCE.search(entry.evidence):
            raise AssertionError(f"{where}: {op} {dtypes}: evidence must name a gaudi-pytorch-bridge or vllm-gaudi "
                                 "file:line, or `covered-by <fix>/device_ops.txt:<line>` (an entry that does)")
    return entries


def _dtypes(args: tuple, kwargs: dict, out: object) -> str:
    flat = torch.utils._pytree.tree_flatten((args, kwargs))[0]
    dtypes = [str(a.dtype).removeprefix("torch.") for a in flat if isinstance(a, torch.Tensor)]
    if not dtypes:
        outs = torch.utils._pytree.tree_flatten(out)[0]
        dtypes = ["->" + ",".join(str(o.dtype).removeprefix("torch.") for o in outs if isinstance(o, torch.Tensor))]
    return ",".join(dtypes)


class OpRecorder(torch.utils._python_dispatch.TorchDispatchMode):
    """Every aten op dispatched, with its input tensors' dtypes (for an op without tensor
    inputs, a factory: `->` its outputs' dtypes). With `device` (tensors standing for device
    tensors; `sources`: the files whose factory calls are read), only the device path goes to
    ``ops``: an op with a device input (its outputs are device tensors too), or a factory whose
    calling line in `sources` names a device; the rest goes to ``host_ops``."""

    def __init__(self, device: Optional[Iterable[torch.Tensor]] = None, sources: Iterable[Path] = ()):
        super().__init__()
        self.ops: dict[tuple[str, str], int] = {}
        self.host_ops: dict[tuple[str, str], int] = {}
        self.tracking = device is not None
        self._device: dict[int, weakref.ref] = {}  # id -> the tensor (Tensor's == is elementwise)
        self._sources = {str(Path(s).resolve()) for s in sources}
        for t in device or ():
            self.mark(t)

    def mark(self, t: torch.Tensor) -> None:
        self._device[id(t)] = weakref.ref(t)

    def on_device(self, t: torch.Tensor) -> bool:
        ref = self._device.get(id(t))
        return ref is not None and ref() is t

    def __enter__(self):
        # A host tensor copied to the device (`.to(device, non_blocking=True)`) is a device tensor
        # from then on: on CPU that copy is the tensor itself and dispatches nothing.
        if self.tracking:
            to = self._saved_to = torch.Tensor.to
            recorder = self

            def to_device(t, *args, **kwargs):
                out = to(t, *args, **kwargs)
                if any(isinstance(a, (torch.device, str)) for a in (*args, kwargs.get("device"))):
                    recorder.mark(out)
                return out

            torch.Tensor.to = to_device
        return super().__enter__()

    def __exit__(self, *exc):
        if self.tracking:
            torch.Tensor.to = self._saved_to
        return super().__exit__(*exc)

    def _factory_on_device(self) -> bool:
        frame = sys._getframe(2)
        while frame is not None:
            if str(Path(frame.f_code.co_filename).resolve()) in self._sources:
                return "device" in linecache.getline(frame.f_code.co_filename, frame.f_lineno)
            frame = frame.f_back
        return True  # not called from the audited source: counted as device, never missed

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        key = (str(func), _dtypes(args, kwargs, out))
        on_device = True
        if self.tracking:
            inputs = [a for a in torch.utils._pytree.tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
            on_device = any(self.on_device(a) for a in inputs) if inputs else self._factory_on_device()
            if on_device:
                for o in torch.utils._pytree.tree_flatten(out)[0]:
                    if isinstance(o, torch.Tensor):
                        self.mark(o)
        target = self.ops if on_device else self.host_ops
        target[key] = target.get(key, 0) + 1
        return out


def unsupported(allowed: dict[tuple[str, str], AllowedOp]) -> list[tuple[str, str]]:
    """The entries listed as not run by Gaudi (``unsupported:``)."""
    return sorted(k for k, e in allowed.items() if e.evidence.startswith(UNSUPPORTED))


def classify(seen: dict[tuple[str, str], set[str]], allowed: dict[tuple[str, str], AllowedOp],
             allowlist_name: str) -> list[str]:
    """The failures of an op stream: `seen` maps (op, dtypes) to the batches it was seen in."""
    failures: list[str] = []
    for (op, dtypes), batches in sorted(seen.items()):
        packet = op.rsplit(".", 1)[0]
        where = ", ".join(sorted(batches))
        if packet in HOST_SYNC_OPS:
            failures.append(f"{op} ({dtypes}) reads a device value on the host: a sync on every step [{where}]")
        elif packet in DATA_DEPENDENT_OPS:
            failures.append(f"{op} ({dtypes}) has a data-dependent output shape [{where}]")
        elif (op, dtypes) not in allowed:
            failures.append(f"{op} ({dtypes}) is not in {allowlist_name}: no evidence Gaudi compiles it [{where}]")
        elif allowed[op, dtypes].evidence.startswith(UNSUPPORTED):
            entry = allowed[op, dtypes]
            failures.append(f"{op} ({dtypes}) is listed {allowlist_name}:{entry.line} as unsupported on Gaudi: "
                            f"{entry.evidence.removeprefix(UNSUPPORTED).strip()} [{where}]")
    return failures
