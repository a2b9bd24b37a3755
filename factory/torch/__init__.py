"""PyTorch integration: the product's ops as torch.library custom ops (`torch.ops.kfactory.*`), drop-in
modules whose backward (and fused forward) run them, and `patch(model)` to swap a model's modules.

Importing this package registers the ops; it needs PyTorch (`pip install 'kernel-factory[bench]'`).
"""

from __future__ import annotations

from .modules import Conv1d, Conv2d, Conv3d, DepthwiseSeparableConv2d, GroupNorm
from .ops import KernelFactoryFallback, clear_kernel_choices, conv_bwd_data, conv_bwd_weight, dwsep_conv_fwd, groupnorm_bwd
from .patch import PatchReport, Swap, patch

__all__ = ["Conv1d", "Conv2d", "Conv3d", "DepthwiseSeparableConv2d", "GroupNorm", "KernelFactoryFallback",
           "PatchReport", "Swap", "clear_kernel_choices", "conv_bwd_data", "conv_bwd_weight", "dwsep_conv_fwd",
           "groupnorm_bwd", "patch"]
