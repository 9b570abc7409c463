"""Choosing the MaxSim kernel, and the Triton kernel's tests run under Triton's interpreter."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from evidra.cli.main import build_parser
from evidra.core.errors import InvalidInputError, MissingDependencyError
from evidra.retrieval.index.multivector import MaxSimOptions, MultiVectorIndex
from evidra.retrieval.kernels import choice as kernels
from evidra.retrieval.kernels import maxsim_amx, maxsim_avx512, maxsim_avx512_bf16

CUDA = torch.device("cuda")  # only named: nothing here touches a GPU
CPU = torch.device("cpu")


def test_auto_is_torch_off_cuda_and_triton_on_cuda_when_installed(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    assert kernels.resolve("auto", CPU) == "torch"
    monkeypatch.setattr(kernels, "triton_installed", lambda: True)
    assert kernels.resolve("auto", CUDA) == "triton"
    assert kernels.resolve("auto", CPU) == "torch"  # installed, but the index is not on CUDA
    monkeypatch.setattr(kernels, "triton_installed", lambda: False)
    with caplog.at_level(logging.INFO, logger="evidra.retrieval.kernels.choice"):
        assert kernels.resolve("auto", CUDA) == "torch"  # the chunked torch fallback
    assert "Triton is not installed" in caplog.text


def test_forced_kernels_are_honoured_or_refused_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    assert kernels.resolve("torch", CUDA) == "torch"
    monkeypatch.setattr(kernels, "triton_installed", lambda: False)
    with pytest.raises(MissingDependencyError, match=r"evidra\[gpu\]"):
        kernels.resolve("triton", CUDA)
    monkeypatch.setattr(kernels, "triton_installed", lambda: True)
    assert kernels.resolve("triton", CUDA) == "triton"
    monkeypatch.setattr(kernels, "interpreting", lambda: False)
    with pytest.raises(InvalidInputError, match="runs on CUDA devices, but the index is on cpu"):
        kernels.resolve("triton", CPU)
    monkeypatch.setattr(kernels, "interpreting", lambda: True)
    assert kernels.resolve("triton", CPU) == "triton"  # the interpreter runs it on CPU tensors


def test_unknown_kernel_names_fail_before_anything_loads() -> None:
    assert set(kernels.CHOICES) == {"auto", "torch", "triton", "avx512", "amx", "avx512_bf16"}
    with pytest.raises(InvalidInputError, match="MaxSim kernel 'cuda': use one of auto, "):
        MaxSimOptions(kernel="cuda")  # type: ignore[arg-type]


def test_the_index_scores_with_the_kernel_it_resolved(tmp_path: Path) -> None:
    index = MultiVectorIndex.create(tmp_path / "idx", 4, options=MaxSimOptions(device="cpu", kernel="torch"))
    assert index.kernel == "torch" and index._score is kernels.score_torch
    index.add(["a", "b"], [torch.tensor([[1.0, 0, 0, 0]]), torch.tensor([[0, 1.0, 0, 0], [0.5, 0.5, 0, 0]])])
    hits = index.search([torch.tensor([[1.0, 0, 0, 0]])], k=2)[0]
    assert [(h.page_id, h.score) for h in hits] == [("a", 1.0), ("b", 0.5)]  # max(0, 0.5) for b


def test_a_reopened_index_scores_with_the_kernel_and_dtype_it_recorded(
    tmp_path: Path, cpu_profile: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Reopened with ``auto``, an index keeps the arithmetic it was written with (its scores do not
    move with the machine's choice) where that runs on the CPU in use; elsewhere auto chooses."""
    for module in (maxsim_avx512, maxsim_amx, maxsim_avx512_bf16):  # as if every kernel ran here
        monkeypatch.setattr(module, "available", lambda: True)
    auto = MaxSimOptions(device="cpu")
    cpu_profile("avx512_bf16")
    written = MultiVectorIndex.create(tmp_path / "idx", 32, options=auto)
    assert (written.compute_dtype, written.kernel) == ("bfloat16", "avx512_bf16")
    cpu_profile("amx")  # auto would pick the AMX kernel here, but the recorded one runs too
    reopened = MultiVectorIndex.open(tmp_path / "idx", options=auto)
    assert (reopened.compute_dtype, reopened.kernel) == ("bfloat16", "avx512_bf16")
    forced = MultiVectorIndex.open(tmp_path / "idx", options=MaxSimOptions(device="cpu", kernel="torch"))
    assert forced.kernel == "torch"  # a kernel named in the options is a choice, not a default
    cpu_profile("avx512")  # no bf16 in hardware: auto chooses afresh, and says so
    with caplog.at_level(logging.INFO, logger="evidra.retrieval.index.multivector"):
        moved = MultiVectorIndex.open(tmp_path / "idx", options=auto)
    assert (moved.compute_dtype, moved.kernel) == ("float32", "avx512")
    assert "written scoring MaxSim in 'bfloat16', which auto cannot pick on cpu" in caplog.text


def test_a_recorded_kernel_that_cannot_run_is_replaced_with_a_note(
    tmp_path: Path, cpu_profile: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    cpu_profile("avx2")
    index = MultiVectorIndex.create(tmp_path / "idx", 32, options=MaxSimOptions(device="cpu"))
    for name in ("avx512", "../../etc/passwd"):  # written on another CPU; a hostile metadata value
        index.store.set_meta("maxsim_kernel", name)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="evidra.retrieval.index.multivector"):
            reopened = MultiVectorIndex.open(tmp_path / "idx", options=MaxSimOptions(device="cpu"))
        assert (reopened.compute_dtype, reopened.kernel) == ("float32", "torch")
        assert f"with the {name!r} kernel, which cannot score float32 on cpu here" in caplog.text


def test_cli_offers_every_kernel() -> None:
    parser = build_parser()
    search = ["index", "search", "--index", "i", "q"]
    assert parser.parse_args(search).maxsim_kernel == "auto"
    for name in kernels.CHOICES:
        assert parser.parse_args([*search, "--maxsim-kernel", name]).maxsim_kernel == name
    serve = ["serve-index", "--index", "i", "--maxsim-kernel", "torch"]
    assert parser.parse_args(serve).maxsim_kernel == "torch"
    with pytest.raises(SystemExit):
        parser.parse_args([*search, "--maxsim-kernel", "cuda"])


@pytest.mark.slow
def test_the_triton_kernel_tests_pass_under_the_interpreter() -> None:
    """``test_maxsim_triton.py`` in a fresh process with ``TRITON_INTERPRET=1``: the variable must be
    set before Triton is imported, which this process may already have done."""
    pytest.importorskip("triton")
    if kernels.interpreting() or torch.cuda.is_available():
        pytest.skip("this process runs test_maxsim_triton.py itself")
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    target = str(Path(__file__).with_name("test_maxsim_triton.py"))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", target]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    summary = proc.stdout.strip().splitlines()[-1]
    assert re.search(r"^\d+ passed in", summary), summary  # nothing skipped or failed


# what one launch passes (maxsim_triton.score_blocks), as Triton's ahead-of-time compiler takes it
_POINTERS = ("q_ptr", "qlen_ptr", "p_ptr", "start_ptr", "plen_ptr", "col_ptr", "out_ptr")
_CONSTEXPRS = ("DIM", "S", "GROUP", "BLOCK_T", "BLOCK_P", "BLOCK_D", "SIGNS", "WIDEN", "PRECISION")


@pytest.mark.filterwarnings("ignore:TRITON_DEFAULT_FP_FUSION is unset")
@pytest.mark.parametrize(
    ("dtype", "signs", "block", "product"),
    [
        ("fp16", False, 64, "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16"),  # Hopper tensor cores
        ("bf16", True, 64, "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16"),  # sign codes
        ("fp32", False, 32, "fma.rn.f32"),  # fp32 stays fp32: CUDA cores, not TF32
    ],
)
def test_the_kernel_compiles_for_hopper_without_a_gpu(
    dtype: str, signs: bool, block: int, product: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Triton compiles for a GPU it does not have: this checks the compiled path the interpreter skips
    (code generation down to the machine code ptxas assembles), and that page vectors are read 16
    bytes at a time, as the runtime's alignment specialisation (pointers divisible by 16) allows."""
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from evidra.retrieval.kernels import maxsim_triton

    if maxsim_triton.INTERPRETED:
        pytest.skip("Triton was imported in interpreter mode")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))  # compile for real, not from a cache
    types = [f"*{dtype}", "*i32", "*u8" if signs else f"*{dtype}", "*i64", "*i64", "*i64", "*fp32"]
    signature = {**dict(zip(_POINTERS, types, strict=True)), "n_queries": "i32", "n_cols": "i32"}
    signature.update(dict.fromkeys(_CONSTEXPRS, "constexpr"))
    precision = "ieee" if dtype == "fp32" else "tf32"
    values = (128, 32, block // 32, block, block, 128, signs, False, precision)  # D 128, queries of 32
    constants = dict(zip(_CONSTEXPRS, values, strict=True))
    aligned = {(i,): [["tt.divisibility", 16]] for i in range(len(_POINTERS))}
    source = ASTSource(maxsim_triton._maxsim_kernel, signature, constants, aligned)
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    ptx = compiled.asm["ptx"]
    assert compiled.asm["cubin"]  # ptxas assembled it
    assert product in ptx
    assert "cp.async.cg.shared.global" in ptx or "ld.global.v4" in ptx  # 16-byte loads
