"""The compiler's figures per kernel (factory.kernel_resources): read from NVRTC's ptxas report, for a
kernel that spills and one that does not, kept in the compile cache and shown by `kfactory tune`."""

from __future__ import annotations

import json

import pytest

from factory.backends import BackendKind, compiler_for
from factory.kernel_resources import KernelResources, from_ptxas_log, main_resources

LOG = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'kf_finish' for 'sm_90'
ptxas info    : Function properties for kf_finish
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, 380 bytes cmem[0]
ptxas info    : Compiling entry function 'kf_main' for 'sm_90'
ptxas info    : Function properties for kf_main
ptxas         .     296 bytes stack frame, 40 bytes spill stores, 48 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 296 bytes cumulative stack size, 4096 bytes smem
"""

# Many values live at once: with 24 registers (sm_90's least) a thread must spill them; with the default it need not.
PRESSURE = r"""
extern "C" __global__ void kf_main(float* out, const float* in, int n) {
  float v[48];
#pragma unroll
  for (int i = 0; i < 48; ++i) v[i] = in[threadIdx.x + i * n];
  float acc = 0.f;
#pragma unroll
  for (int r = 0; r < 8; ++r) {
#pragma unroll
    for (int i = 0; i < 48; ++i) acc = acc * v[(i + r) % 48] + v[i];
  }
  out[threadIdx.x] = acc;
}
"""


def test_each_entry_function_s_figures_are_read_from_the_report():
    found = from_ptxas_log(LOG)
    assert found["kf_finish"] == KernelResources(12, 0, 0, 0, 0)
    assert found["kf_main"] == KernelResources(255, 40, 48, 296, 4096)
    assert main_resources(LOG).spill_bytes == 88
    assert main_resources("") is None and main_resources("ptxas info : 0 bytes gmem") is None


def test_a_stored_figure_reads_back_and_anything_else_is_none():
    figures = KernelResources(64, 0, 0, 16, 2048)
    assert KernelResources.from_json(figures.to_json()) == figures
    for bad in ("", "[]", '{"registers": 1}', "{not json", '{"registers": "x", "spill_store_bytes": 0}'):
        assert KernelResources.from_json(bad) is None


def test_nvrtc_reports_registers_and_spills():
    compile_cuda = compiler_for(BackendKind.CUDA)
    roomy = main_resources(compile_cuda(PRESSURE, "sm_90", ()).log)
    tight = main_resources(compile_cuda(PRESSURE, "sm_90", ("--maxrregcount=24",)).log)
    assert roomy is not None and tight is not None
    assert roomy.registers > 24 and roomy.spill_bytes == 0
    assert tight.registers <= 24 and tight.spill_bytes > 0 and tight.stack_bytes > 0


def test_tune_shows_each_candidate_s_registers_and_spills(monkeypatch, tmp_path, capsys):
    import factory.backends
    from factory import cli
    from factory.problem import DType, Layout, parse_conv_problem
    from fake_gpu import FakeGPU, isolate

    isolate(monkeypatch, tmp_path)
    problem = parse_conv_problem("N=1,G=4,C=1,K=1,input=8x8,filter=3x3,pad=1", Layout.NHWGC, DType.FP16)
    gpu = FakeGPU(problem)
    monkeypatch.setattr(factory.backends, "get_backend", lambda *a, **k: gpu)
    monkeypatch.setattr("factory.compile_cache.cached_resources",
                        lambda kind, job, directory=None: KernelResources(40 + len(job.name) % 7, 8, 0, 8, 0))
    monkeypatch.setattr(cli.console, "width", 400)
    args = ["tune", "--op", "conv_bwd_weight", "--layout", "NHWGC", "--dtype", "fp16", "--problem", problem.spec(),
            "--reps", "4", "--db", str(tmp_path / "t.sqlite")]
    assert cli.main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if "instance" in line)
    assert "regs" in header and "spill B" in header and "occ" in header
    rows = [line for line in lines if line.startswith("│")]
    assert rows and all(" 8 │" in line for line in rows)
    monkeypatch.setattr(cli.console, "width", 60)  # a narrow terminal keeps whole names, not the figures
    assert cli.main(args) == 0
    narrow = capsys.readouterr().out.splitlines()
    assert "regs" not in next(line for line in narrow if "instance" in line)
    assert max(len(line) for line in narrow) <= 60
    assert cli.main([*args, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["measurements"]
    assert rows and all(r["resources"]["spill_store_bytes"] == 8 for r in rows)
    assert all(0.0 < r["occupancy"] <= 1.0 for r in rows)  # 40-46 registers: every block size fits


LDS_KERNEL = r"""
#include <hip/hip_runtime.h>
extern "C" __global__ void kf_main(float* a, int n) {
  __shared__ float s[512];
  s[threadIdx.x] = a[threadIdx.x * n];
  __syncthreads();
  a[threadIdx.x] = s[(threadIdx.x + 1) % 512] * 2.0f;
}
"""


def hipcc_remarks(source: str, tmp_path) -> tuple[bytes, dict[str, int]]:
    """A gfx90a code object from Debian's hipcc, and the figures its resource-usage remarks print."""
    import os
    import re
    import shutil
    import subprocess

    if shutil.which("hipcc") is None:
        pytest.skip("hipcc is not installed (scripts/setup.sh installs it as root on Debian)")
    (tmp_path / "k.hip").write_text(source)
    proc = subprocess.run(["hipcc", "--offload-arch=gfx90a", "--cuda-device-only", "--no-gpu-bundle-output", "-O3",
                           "-c", "-Rpass-analysis=kernel-resource-usage", "-o", str(tmp_path / "k.hsaco"),
                           str(tmp_path / "k.hip")], capture_output=True, text=True, timeout=300,
                          env=os.environ | {"HIP_PLATFORM": "amd"})
    assert proc.returncode == 0, proc.stderr
    remarks = dict(re.findall(r"remark:\s+([A-Za-z ]+?)(?: \[[^\]]*\])?: (\d+) \[", proc.stderr))
    return (tmp_path / "k.hsaco").read_bytes(), {k: int(v) for k, v in remarks.items()}


@pytest.mark.parametrize("source", [LDS_KERNEL, "#include <hip/hip_runtime.h>\n" + PRESSURE], ids=["lds", "pressure"])
def test_an_amd_code_object_s_metadata_gives_what_the_compiler_reports(source, tmp_path):
    from factory.kernel_resources import from_amdgpu_code_object, from_compile

    binary, remarks = hipcc_remarks(source, tmp_path)
    figures = from_amdgpu_code_object(binary)["kf_main"]
    assert figures.registers == remarks["VGPRs"] + remarks["AGPRs"] > 0
    assert figures.spill_store_bytes == 4 * remarks["VGPRs Spill"]
    assert figures.stack_bytes == remarks["ScratchSize"] and figures.shared_bytes == remarks["LDS Size"]
    assert from_compile(binary, "") == figures
    assert from_amdgpu_code_object(b"\x7fELF" + b"\0" * 60) == {} and from_amdgpu_code_object(b"not elf") == {}
