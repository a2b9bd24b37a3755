"""PyTorch integration: the product's ops as torch.library custom ops (`torch.ops.kfactory.*`), drop-in
modules whose backward (and fused forward) run them, `patch(model)` to swap a model's modules, and
`tune(model, example_inputs)` to tune the problems a training step meets.

Importing this package registers the ops; it needs PyTorch (`pip install 'kernel-factory[bench]'`).
"""

from __future__ import annotations

from .modules import Conv1d, Conv2d, Conv3d, DepthwiseSeparableConv2d, GroupNorm
from .ops import KernelFactoryFallback, clear_kernel_choices, conv_bwd_data, conv_bwd_weight, dwsep_conv_fwd, groupnorm_bwd
from .patch import PatchReport, Swap, patch
from .tuning import ModelTuneReport, Prepared, QueuedJobs, TunedProblem, prepare, step_problems, tune

__all__ = ["Conv1d", "Conv2d", "Conv3d", "DepthwiseSeparableConv2d", "GroupNorm", "KernelFactoryFallback",
           "PatchReport", "Swap", "clear_kernel_choices", "conv_bwd_data", "conv_bwd_weight", "dwsep_conv_fwd",
           "groupnorm_bwd", "patch", "ModelTuneReport", "QueuedJobs", "TunedProblem", "step_problems", "tune", "Prepared", "prepare"]
