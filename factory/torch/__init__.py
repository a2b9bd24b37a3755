"""PyTorch integration: the product's ops as torch.library custom ops (`torch.ops.kfactory.*`).

Importing this package registers them; it needs PyTorch (`pip install 'kernel-factory[bench]'`).
"""

from __future__ import annotations

from .ops import KernelFactoryFallback, clear_kernel_choices, conv_bwd_data, conv_bwd_weight, dwsep_conv_fwd, groupnorm_bwd

__all__ = ["KernelFactoryFallback", "clear_kernel_choices", "conv_bwd_data", "conv_bwd_weight", "dwsep_conv_fwd",
           "groupnorm_bwd"]
