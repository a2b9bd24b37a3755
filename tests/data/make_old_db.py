"""Write a small tuning DB with whichever kernel-factory is on sys.path: how the committed fixtures of
databases written before Alembic were made (tests/test_migrations.py upgrades copies of them).

    git archive 6e246aad tuning_db factory | tar -x -C /tmp/schema1-code   # schema 1: no source hashes
    git archive f9517580 tuning_db factory | tar -x -C /tmp/schema2-code   # schema 2: the last before Alembic
    PYTHONPATH=/tmp/schema1-code python tests/data/make_old_db.py tests/data/tuning_schema1.sqlite
    PYTHONPATH=/tmp/schema2-code python tests/data/make_old_db.py tests/data/tuning_schema2.sqlite

Two devices, four measurements (one failed), two winners; WAL mode, checkpointed on close.
"""

import sys

from factory.backends.base import BackendKind, DeviceInfo
from tuning_db import SCHEMA_VERSION, Measurement, TuningDB

H100 = DeviceInfo(BackendKind.CUDA, "sm_90", "NVIDIA H100 80GB HBM3", 132, "550.54.15", "12.4.131")
MI250X = DeviceInfo(BackendKind.HIP, "gfx90a", "AMD Instinct MI250X", 110, "6.0.32830", "6.0.32830")
CONV = "conv_bwd_weight:NHWGC:fp16:2d:N=2,G=8,C=1,K=1,input=9x9,filter=3x3,stride=1x1,pad=1x1,dilation=1x1"
NORM = "groupnorm_bwd:NGCHW:fp32:2d:N=4,C=64,G=32,input=8x8,affine=1"
SOURCE_HASH = "ab" * 32  # schema 2 stores it; schema 1 has no such column


def main(path: str) -> None:
    code = {"source_hash": SOURCE_HASH} if SCHEMA_VERSION >= 2 else {}
    with TuningDB(path) as db:
        db.record(CONV, "conv_bwd_weight", H100, [
            Measurement("conv_bwd_weight_2d_nhwgc_fp16_dw_a", 4.5, 0.1, 25, True, **code),
            Measurement("conv_bwd_weight_2d_nhwgc_fp16_dw_b", 3.5, 0.1, 25, True, **code),
            Measurement("conv_bwd_weight_2d_nhwgc_fp16_dl_c", None, None, 0, False, "compile: boom", **code),
        ])
        db.record(NORM, "groupnorm_bwd", MI250X, [
            Measurement("groupnorm_bwd_2d_ngchw_fp32_fused_a", 7.25, 0.2, 25, True, gbps=12.0, tflops=0.1, **code),
        ])
        print(path, "schema", db.schema_version)


if __name__ == "__main__":
    main(sys.argv[1])
