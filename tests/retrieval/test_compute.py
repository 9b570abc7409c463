from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from evidra.cli.main import build_parser, main
from evidra.core.errors import InvalidInputError
from evidra.retrieval.index._shards import ShardStore
from evidra.retrieval.index.multivector import MaxSimOptions, MultiVectorIndex
from evidra.retrieval.kernels import compute_dtype as compute

DIM = 32
CPU = torch.device("cpu")
FP32_FASTEST = {"float32": 180.0, "bfloat16": 150.0, "float16": 7.0}
BF16_FASTEST = {"float32": 182.0, "bfloat16": 1013.0, "float16": 6.9}  # AVX-512 bf16, no FP16
EPYC = compute.CpuFeatures("AMD EPYC", frozenset({"sse2", "avx2", "avx512f", "avx512_bf16"}))


def test_choose_picks_fp32_when_it_is_fastest() -> None:
    assert compute.choose(FP32_FASTEST, compute.CANDIDATES["cpu"]) == "float32"


def test_choose_picks_a_half_dtype_only_when_clearly_faster() -> None:
    cpu = compute.CANDIDATES["cpu"]
    assert compute.choose(BF16_FASTEST, cpu) == "bfloat16"
    # 1.2x faster is within probe noise of fp32 (margin 1.25): the precise dtype wins
    assert compute.choose({"float32": 100.0, "bfloat16": 120.0}, cpu) == "float32"
    assert compute.choose({"float32": 100.0, "bfloat16": 130.0}, cpu) == "bfloat16"
    # fp16 as fast as bf16 (AMX-FP16, GPUs): the one with more mantissa bits
    assert compute.choose({"float32": 100.0, "float16": 900.0, "bfloat16": 1000.0}, cpu) == "float16"
    assert compute.choose({"float16": 300.0, "bfloat16": 310.0}, compute.CANDIDATES["cuda"]) == "float16"


def test_choose_ignores_unmeasured_dtypes_and_needs_one_rate() -> None:
    assert compute.choose({"bfloat16": 50.0}, compute.CANDIDATES["cpu"]) == "bfloat16"
    with pytest.raises(InvalidInputError, match="no GEMM rate"):
        compute.choose({}, compute.CANDIDATES["cpu"])


def test_resolve_uses_the_probe_only_for_auto() -> None:
    def refuse(device: torch.device) -> dict[str, float]:
        raise AssertionError("an explicit dtype must not probe")

    assert compute.resolve("float16", CPU, refuse) == "float16"
    assert compute.resolve("auto", CPU, lambda d: FP32_FASTEST, features=EPYC) == "float32"
    assert compute.resolve("auto", CPU, lambda d: BF16_FASTEST, features=EPYC) == "bfloat16"
    assert compute.resolve("auto", torch.device("meta"), refuse) == "float32"  # no candidates known
    assert (
        compute.resolve("auto", CPU, lambda d: BF16_FASTEST, exclude=("bfloat16",), features=EPYC)
        == "float32"
    )


def test_half_dtypes_need_a_hardware_path_on_x86() -> None:
    # a busy machine can make every GEMM look equally slow; fp16 must still not win on this CPU
    stalled = {"float32": 3.0, "bfloat16": 4.0, "float16": 5.0}
    assert compute.candidates(CPU, EPYC) == ("float32", "bfloat16")
    assert compute.resolve("auto", CPU, lambda d: stalled, features=EPYC) == "bfloat16"
    avx2_only = compute.CpuFeatures("old x86", frozenset({"sse2", "avx2"}))
    assert compute.resolve("auto", CPU, lambda d: BF16_FASTEST, features=avx2_only) == "float32"
    amx = compute.CpuFeatures("Xeon", frozenset({"sse2", "avx2", "amx_bf16", "amx_fp16"}))
    assert compute.candidates(CPU, amx) == compute.CANDIDATES["cpu"]
    unknown = compute.CpuFeatures("", frozenset())  # not Linux, or not x86: the probe alone decides
    assert compute.candidates(CPU, unknown) == compute.CANDIDATES["cpu"]
    assert compute.candidates(torch.device("cuda"), avx2_only) == ("float16", "bfloat16")
    with pytest.raises(InvalidInputError, match="use one of auto, float32"):
        compute.resolve("fp8", CPU)


def test_probe_measures_every_candidate_once() -> None:
    rates = compute.probe_rates(CPU)
    assert set(rates) == set(compute.candidates(CPU)) and all(r > 0 for r in rates.values())
    assert compute.probe_rates(CPU) is rates  # cached: one probe per process


def test_measure_rates_drops_a_hopeless_dtype_after_one_round(monkeypatch: pytest.MonkeyPatch) -> None:
    timed: list[torch.dtype] = []
    speed = {torch.float32: 100.0, torch.bfloat16: 200.0, torch.float16: 5.0}

    def fake_gflops(self: compute.Gemm) -> float:
        timed.append(self.out.dtype)
        return speed[self.out.dtype]

    monkeypatch.setattr(compute.Gemm, "gflops", fake_gflops)
    rates = compute.measure_rates(["float32", "float16", "bfloat16"], CPU, rounds=3)
    assert rates == {"float32": 100.0, "float16": 5.0, "bfloat16": 200.0}
    # fp16 is timed in the first round only (2 calls): 5 * 8 < 200 from then on
    assert timed.count(torch.float16) == 2 and timed.count(torch.float32) == 6


def test_gemm_rate_is_positive_for_a_tiny_shape() -> None:
    assert compute.gemm_gflops(torch.float32, CPU, rows=64, tokens=64, dim=16, repeats=1) > 0


def test_cpu_features_parse_the_first_processor(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text(
        "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512f avx512_bf16\n\n"
        "processor\t: 1\nmodel name\t: other\nflags\t\t: fpu\n"
    )
    features = compute.cpu_features(info)
    assert features.model == "AMD EPYC" and "avx512_bf16" in features.flags
    assert features.summary() == (
        "AMD EPYC; avx2 yes avx512f yes avx512_bf16 yes avx512_fp16 no amx_bf16 no amx_fp16 no"
    )
    assert compute.cpu_features(tmp_path / "missing") == compute.CpuFeatures("", frozenset())


def _unit(*shape: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.nn.functional.normalize(torch.randn(*shape, generator=g), dim=-1)


def _store(root: Path, pages: dict[str, torch.Tensor], **options: Any) -> MultiVectorIndex:
    index = MultiVectorIndex.create(root, DIM, options=MaxSimOptions(device="cpu", **options))
    index.add(list(pages), list(pages.values()))
    return index


PAGES = {f"p{i:02d}": _unit(8 + i % 5, DIM, seed=i) for i in range(40)}
QUERIES = [_unit(6, DIM, seed=100 + i) for i in range(4)]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_every_compute_dtype_alone_ranks_like_fp32(tmp_path: Path, dtype: str) -> None:
    def ranked(name: str) -> list[list[tuple[str, float]]]:
        index = _store(tmp_path / name, PAGES, compute_dtype=name, rescore=0)
        held = compute.storage_for("auto", name)  # 16-bit: fp32 scoring widens fp16 blocks
        assert index.compute_dtype == name and {b.vectors.dtype for b in index._blocks} == {
            compute.DTYPES[held]
        }
        return [[(h.page_id, h.score) for h in row] for row in index.search(QUERIES, k=len(PAGES))]

    reference = ranked("float32")
    got = ranked(dtype) if dtype != "float32" else reference
    tol = {"float32": 0.0, "float16": 2e-3, "bfloat16": 3e-2}[dtype]  # 6 tokens x rounding of each max
    for ref_row, row in zip(reference, got, strict=True):
        exact = dict(ref_row)
        assert all(abs(score - exact[p]) <= tol for p, score in row)
        # a page may rank above another only if fp32 does too, or they are within rounding
        lowest_above = float("inf")
        for p, _ in row:
            assert exact[p] <= lowest_above + 2 * tol
            lowest_above = min(lowest_above, exact[p])
        assert row[0][0] == ref_row[0][0]


def test_bf16_with_fp32_rescore_returns_fp32_hits(tmp_path: Path) -> None:
    fp32 = _store(tmp_path / "fp32", PAGES, compute_dtype="float32").search(QUERIES, k=10)
    bf16 = _store(tmp_path / "bf16", PAGES, compute_dtype="bfloat16", rescore=8).search(QUERIES, k=10)
    for ref_row, row in zip(fp32, bf16, strict=True):
        assert [h.page_id for h in row] == [h.page_id for h in ref_row]
        assert [h.score for h in row] == pytest.approx([h.score for h in ref_row], abs=1e-5)


def test_override_is_honoured_and_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(compute, "cpu_features", lambda: EPYC)
    monkeypatch.setattr(compute, "probe_rates", lambda device: BF16_FASTEST)
    auto = MultiVectorIndex.create(tmp_path / "idx", DIM, options=MaxSimOptions(device="cpu"))
    auto.add(["a"], [_unit(4, DIM, seed=1)])
    assert auto.compute_dtype == "bfloat16" and auto._blocks[0].vectors.dtype == torch.bfloat16
    assert auto.store.meta()["compute_dtype"] == "bfloat16"
    auto.close()

    def refuse(device: torch.device) -> dict[str, float]:
        raise AssertionError("a recorded dtype that runs here is taken without probing")

    monkeypatch.setattr(compute, "probe_rates", refuse)
    # reopened with auto, it scores in the dtype it recorded (its scores do not move with the probe)
    assert MultiVectorIndex.open(tmp_path / "idx").compute_dtype == "bfloat16"
    monkeypatch.setattr(compute, "probe_rates", lambda device: FP32_FASTEST)
    forced = MultiVectorIndex.open(
        tmp_path / "idx", options=MaxSimOptions(device="cpu", compute_dtype="float16")
    )
    assert forced.store.meta()["compute_dtype"] == "bfloat16"  # searching alone writes nothing
    forced.add(["b"], [_unit(5, DIM, seed=2)])
    assert forced.compute_dtype == "float16" and forced.store.meta()["compute_dtype"] == "float16"
    assert {b.vectors.dtype for b in forced._blocks} == {torch.float16}
    monkeypatch.setattr(compute, "probe_rates", lambda device: BF16_FASTEST)
    # the recorded fp16 has no hardware path on this CPU: auto chooses afresh and says so; without
    # the fp32 re-score bf16 does not rank like fp32, so auto must not pick it
    with caplog.at_level("INFO", logger="evidra.retrieval.index.multivector"):
        reopened = MultiVectorIndex.open(tmp_path / "idx", options=MaxSimOptions(rescore=0))
    assert reopened.compute_dtype == "float32"
    assert "written scoring MaxSim in 'float16', which auto cannot pick on cpu" in caplog.text
    with pytest.raises(InvalidInputError, match="rescore must be >= 0"):
        MaxSimOptions(rescore=-1)


def test_sign_bit_codes_are_scored_in_the_compute_dtype(tmp_path: Path) -> None:
    pages = {f"p{i}": _unit(8, DIM, seed=i) for i in range(12)}
    hits = {}
    for name in ("float32", "bfloat16"):
        opts = MaxSimOptions(device="cpu", compute_dtype=name, prefilter="signbits", candidates=12)  # type: ignore[arg-type]
        index = MultiVectorIndex.create(tmp_path / name, DIM, options=opts)
        index.add(list(pages), list(pages.values()))
        hits[name] = [h.page_id for h in index.search([pages["p3"][:4]], k=3)[0]]
    assert hits["float32"][0] == hits["bfloat16"][0] == "p3"


def test_cli_offers_every_compute_dtype() -> None:
    parser = build_parser()
    search = ["index", "search", "--index", "i", "q"]
    assert parser.parse_args(search).compute_dtype == "auto"
    for name in compute.CHOICES:
        assert parser.parse_args([*search, "--compute-dtype", name]).compute_dtype == name
        build = ["index", "build", "--store", "s", "--out", "o", "--encoder", "e", "--compute-dtype", name]
        assert parser.parse_args(build).compute_dtype == name
    with pytest.raises(SystemExit):
        parser.parse_args([*search, "--compute-dtype", "fp8"])
    serve = ["serve-index", "--index", "i", "--compute-dtype", "float32"]
    assert parser.parse_args(serve).compute_dtype == "float32"


def test_cli_build_records_the_compute_dtype(
    synth_store: tuple[Path, Any],
    tiny_dirs: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store, _ = synth_store
    out = tmp_path / "col"
    model = ["--encoder", "colqwen2", "--model", str(tiny_dirs["colqwen2"]), "--device", "cpu"]
    argv = ["index", "build", "--store", str(store), "--out", str(out), *model, "--compute-dtype", "bfloat16"]
    assert main(argv) == 0
    assert "scoring in bfloat16, held in bfloat16" in capsys.readouterr().out
    assert ShardStore.open(out).meta()["compute_dtype"] == "bfloat16"
    fp32 = tmp_path / "fp32"
    argv = ["index", "build", "--store", str(store), "--out", str(fp32), *model, "--compute-dtype", "float32"]
    assert main([*argv, "--storage-dtype", "float32"]) == 0
    assert "scoring in float32, held in float32" in capsys.readouterr().out
    assert ShardStore.open(fp32).meta()["storage_dtype"] == "float32"
    search = ["index", "search", "--index", str(out), "--json", "--compute-dtype", "float32", "revenue"]
    assert main(search) == 0
    assert len(json.loads(capsys.readouterr().out)["hits"]) == 5


@pytest.mark.parametrize("profile", sorted(compute.PROFILES))
def test_each_cpu_profile_picks_its_dtype_and_holds_16_bits(
    tmp_path: Path, profile: str, cpu_profile: Any
) -> None:
    cpu_profile(profile)
    want = {"amx": "bfloat16", "avx512_bf16": "bfloat16", "avx512": "float32", "avx2": "float32"}[profile]
    index = _store(tmp_path / "idx", PAGES)
    assert index.compute_dtype == want
    # 16 bits per dimension whatever the CPU computes in: bf16 blocks, or fp16 widened per block
    assert index.storage_dtype == ("bfloat16" if want == "bfloat16" else "float16")
    assert index.memory_bytes() == sum(b.vectors.numel() for b in index._blocks) * 2
    assert index.store.meta()["storage_dtype"] == index.storage_dtype
    assert index.store.meta()["compute_dtype"] == want
    reference = _store(tmp_path / "ref", PAGES, compute_dtype="float32", storage_dtype="float32")
    assert reference.memory_bytes() == sum(b.vectors.numel() for b in reference._blocks) * 4  # 2x per value
    if not any(b.tiled for b in (*index._blocks, *reference._blocks)):  # same layout: half the bytes
        assert reference.memory_bytes() == 2 * index.memory_bytes()
    for row, ref_row in zip(index.search(QUERIES, k=10), reference.search(QUERIES, k=10), strict=True):
        assert [h.page_id for h in row] == [h.page_id for h in ref_row]  # fp16 widens exactly


def test_widening_reuses_one_buffer_and_matches_fp32_blocks() -> None:
    from evidra.retrieval.kernels.maxsim import build_blocks, score_blocks

    pages = [p for p in PAGES.values()]
    rows = list(range(len(pages)))
    half = build_blocks(pages, rows, max_tokens=64, dtype=torch.float16)
    full = build_blocks([p.half().float() for p in pages], rows, max_tokens=64, dtype=torch.float32)
    assert len(half) > 1  # several blocks share the widening buffer
    got = score_blocks(QUERIES, half, len(pages), dtype=torch.float32)
    want = score_blocks(QUERIES, full, len(pages), dtype=torch.float32)
    # fp16 -> fp32 widening is exact, but the two GEMMs read other buffers: within summation order
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    with pytest.raises(InvalidInputError, match="storage_dtype 'int8'"):
        MaxSimOptions(storage_dtype="int8")  # type: ignore[arg-type]
