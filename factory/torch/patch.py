"""patch(model): turn a model's eligible PyTorch modules into the drop-in ones, in place, and report.

A module is switched by changing its class to the drop-in subclass (modules.py), so its parameters,
buffers, hooks and place in the model stay what they were; `state_dict` is unchanged. The report lists
every module of a kind we cover, swapped or not, and why not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from torch import nn

from .modules import CONV_BWD_DATA, CONV_BWD_WEIGHT, Conv1d, Conv2d, Conv3d, GroupNorm

GROUPNORM_BWD = "groupnorm_bwd"
OPS = (CONV_BWD_DATA, CONV_BWD_WEIGHT, GROUPNORM_BWD)
_DROP_IN: dict[type, type] = {nn.Conv1d: Conv1d, nn.Conv2d: Conv2d, nn.Conv3d: Conv3d, nn.GroupNorm: GroupNorm}


@dataclass(frozen=True)
class Swap:
    """One module of a kind we cover: swapped, or why not."""

    name: str  # its qualified name in the model ("" for the model itself)
    kind: str  # its PyTorch class name
    swapped: bool
    reason: str = ""  # why it was not swapped

    def line(self) -> str:
        where = self.name or "(the model)"
        return f"{where}: {self.kind} swapped" if self.swapped else f"{where}: {self.kind} kept: {self.reason}"


@dataclass(frozen=True)
class PatchReport:
    modules: tuple[Swap, ...]

    @property
    def swapped(self) -> tuple[Swap, ...]:
        return tuple(m for m in self.modules if m.swapped)

    @property
    def kept(self) -> tuple[Swap, ...]:
        return tuple(m for m in self.modules if not m.swapped)

    def __str__(self) -> str:
        head = f"{len(self.swapped)} of {len(self.modules)} modules swapped"
        return "\n".join([head, *(m.line() for m in self.kept)])


def patch(model: nn.Module, ops: Iterable[str] = OPS) -> PatchReport:
    """Swap `model`'s nn.Conv1d/2d/3d (for conv_bwd_data and/or conv_bwd_weight) and nn.GroupNorm (for
    groupnorm_bwd) for the drop-in modules, in place; returns what was swapped and what was kept, and why."""
    wanted = frozenset(ops)
    unknown = wanted - set(OPS)
    if unknown:
        raise ValueError(f"unknown ops {sorted(unknown)}; patch knows {', '.join(OPS)}")
    conv_ops = wanted & {CONV_BWD_DATA, CONV_BWD_WEIGHT}
    entries = []
    for name, module in model.named_modules():
        kind = type(module)
        if kind in _DROP_IN.values():
            entries.append(Swap(name, kind.__name__, False, "already patched"))
            continue
        drop_in = _DROP_IN.get(kind)
        if drop_in is None:
            continue  # not a kind we cover (a subclass of one included: its own forward may differ)
        is_conv = kind is not nn.GroupNorm
        if is_conv and not conv_ops:
            entries.append(Swap(name, kind.__name__, False, "conv ops not asked for"))
            continue
        if not is_conv and GROUPNORM_BWD not in wanted:
            entries.append(Swap(name, kind.__name__, False, "groupnorm_bwd not asked for"))
            continue
        module.__class__ = drop_in
        reason = module.unsupported_reason
        if reason is not None:
            module.__class__ = kind
            entries.append(Swap(name, kind.__name__, False, reason))
            continue
        if is_conv and conv_ops != {CONV_BWD_DATA, CONV_BWD_WEIGHT}:
            module.kfactory_ops = frozenset(conv_ops)
        entries.append(Swap(name, kind.__name__, True))
    return PatchReport(tuple(entries))
