"""Chapter 9's measuring helpers, ``attention_course.benchmark_kernels``, on the CPU.

No test machine has a GPU, so the CUDA paths are driven as far as a CPU allows: the data-sheet lookup by the
names CUDA devices report, the roofline and the TFLOP/s arithmetic with those peaks, and the timing functions on
CPU tensors (the same code times CUDA tensors, synchronising the device around each batch of calls).
"""

from __future__ import annotations

import math

import pytest
import torch

from attention_course import benchmark_kernels as kernels

# ---- the data sheets and the roofline ----------------------------------------------------------------------------

def test_a_gpu_is_found_by_the_name_cuda_reports_and_an_unknown_one_is_not() -> None:
    h100 = kernels.device_peaks("NVIDIA H100 80GB HBM3")
    assert h100 is not None and (h100.tflops_16bit, h100.tflops_fp32, h100.tb_per_s) == (989.0, 67.0, 3.35)
    assert kernels.device_peaks("NVIDIA H200").tb_per_s == 4.8
    assert kernels.device_peaks("NVIDIA GeForce RTX 4090") is None, "an unknown GPU must get no peak"
    assert kernels.device_peaks("cpu") is None and kernels.device_peaks(torch.device("cpu")) is None


def test_every_data_sheet_entry_is_a_dense_peak_with_its_source_in_the_bibliography() -> None:
    from autograder.release import REPO_ROOT

    bib = (REPO_ROOT / "book" / "references.bib").read_text()
    for name, peaks in kernels.DEVICE_PEAKS.items():
        assert name.startswith("NVIDIA "), f"{name!r} is not a name torch.cuda.get_device_name reports"
        assert f"{{{peaks.sheet}," in bib, f"{name}: the data sheet {peaks.sheet!r} is not in references.bib"
        assert 100 < peaks.tflops_16bit < 2000 and 10 < peaks.tflops_fp32 < 100 and 1 < peaks.tb_per_s < 10, name
        assert peaks.tflops_16bit > 10 * peaks.tflops_fp32, f"{name}: the 16-bit peak must be the tensor cores'"


def test_the_peak_follows_the_dtype_and_refuses_one_the_sheets_do_not_give() -> None:
    h100 = kernels.H100_SXM
    assert h100.flops(torch.bfloat16) == h100.flops(torch.float16) == 989e12
    assert h100.flops(torch.float32) == 67e12
    with pytest.raises(ValueError, match="float64"):
        h100.flops(torch.float64)


def test_the_h100_ridge_is_about_300_flop_per_byte() -> None:
    roof = kernels.data_sheet_roof("NVIDIA H100 80GB HBM3", torch.bfloat16)
    assert roof.ridge == pytest.approx(989 / 3.35) and 290 < roof.ridge < 300
    assert roof.source == "data sheet (nvidia2022h100)"
    assert kernels.data_sheet_roof("cpu", torch.float32) is None


def test_the_roofline_is_the_lower_of_the_two_roofs() -> None:
    roof = kernels.Roof(flops=100e12, bandwidth=2e12, source="test")
    assert roof.ridge == 50
    assert roof.attainable(1) == 2e12, "below the ridge the bandwidth sets the rate"
    assert roof.attainable(50) == 100e12
    assert roof.attainable(1000) == 100e12, "above the ridge the peak does"
    with pytest.raises(ValueError, match="intensity"):
        roof.attainable(-1)
    with pytest.raises(ValueError, match="positive"):
        kernels.Roof(flops=0, bandwidth=1, source="test")


def test_a_measured_roof_takes_the_best_rate_and_the_given_bandwidth() -> None:
    rows = [kernels.Timed("a", 1, 1.0, 10.0, 5.0), kernels.Timed("b", 2, 1.0, 30.0, 5.0)]
    roof = kernels.measured_roof(rows, bandwidth=7.0)
    assert (roof.flops, roof.bandwidth, roof.source) == (30.0, 7.0, "measured here")
    with pytest.raises(ValueError, match="at least one"):
        kernels.measured_roof([], 1.0)


# ---- the arithmetic ----------------------------------------------------------------------------------------------

def test_a_product_costs_two_flops_per_term_and_each_operand_moved_once() -> None:
    flops, moved = kernels.product_cost(2, 3, 4, 2)
    assert flops == 2 * 2 * 3 * 4
    assert moved == (2 * 3 + 3 * 4 + 2 * 4) * 2
    with pytest.raises(ValueError, match="m must be an integer"):
        kernels.product_cost(0, 3, 4, 2)
    with pytest.raises(ValueError, match="element_bytes"):
        kernels.product_cost(1, 1, 1, True)


def test_a_batch_of_b_vectors_does_about_b_flops_per_byte_of_16_bit_weights() -> None:
    n, batch = 8192, 64
    row = kernels.Timed("B", batch, 1e-3, *kernels.product_cost(batch, n, n, 2))
    assert row.intensity == pytest.approx(batch, rel=0.02)
    assert row.flops_per_s == pytest.approx(2 * batch * n * n / 1e-3)
    assert row.bytes_per_s == pytest.approx((n * n + 2 * batch * n) * 2 / 1e-3)


def test_attention_flops_count_the_two_products_and_halve_for_causal() -> None:
    assert kernels.attention_flops(2, 3, 5, 7) == 4 * 2 * 3 * 5 * 5 * 7
    assert kernels.attention_flops(2, 3, 5, 7, causal=True) == 2 * 2 * 3 * 5 * 5 * 7
    with pytest.raises(ValueError, match="length must be an integer"):
        kernels.attention_flops(1, 1, 0, 64)


def test_tflops_and_the_share_of_a_peak() -> None:
    # an H100 SXM running causal attention of (4, 16, 4096, 64) in 2 ms
    flops = kernels.attention_flops(4, 16, 4096, 64, causal=True)
    rate = kernels.tflops(flops, 2e-3)
    assert rate == pytest.approx(flops / 2e-3 / 1e12)
    assert kernels.share_of_peak(rate, kernels.H100_SXM.tflops_16bit) == pytest.approx(rate / 989)
    assert kernels.share_of_peak(rate, None) is None, "an unknown device gets no share of a peak"
    with pytest.raises(ValueError, match="seconds > 0"):
        kernels.tflops(1.0, 0.0)
    with pytest.raises(ValueError, match="positive"):
        kernels.share_of_peak(1.0, 0.0)


def test_the_first_turn_is_where_the_time_first_doubles() -> None:
    rows = [kernels.Timed("", b, t, 1.0, 1.0) for b, t in ((1, 1.0), (2, 1.1), (4, 1.9), (8, 2.5), (16, 5.0))]
    assert kernels.first_turn(rows) == 8
    assert kernels.first_turn(rows[:3]) is None
    assert kernels.first_turn(rows, factor=4) == 16
    with pytest.raises(ValueError, match="factor"):
        kernels.first_turn(rows, factor=1)


# ---- timing, on the CPU ------------------------------------------------------------------------------------------

def test_time_per_call_divides_a_batch_by_its_number_of_calls(monkeypatch) -> None:
    clock = iter(range(0, 10_000))  # every perf_counter call advances 1 "second"
    monkeypatch.setattr(kernels.time, "perf_counter", lambda: float(next(clock)))
    calls = []
    seconds = kernels.time_per_call(lambda: calls.append(1), repeats=3, min_time=0.5)
    assert seconds == 1.0, "each batch read the clock once before and once after its single call"
    assert len(calls) == 1 + 3, "one warm-up call, then three batches of one call"


def test_time_per_call_grows_the_batch_until_it_lasts_min_time() -> None:
    calls = []
    seconds = kernels.time_per_call(lambda: calls.append(1), repeats=2, min_time=1e-3)
    assert 0 < seconds < 1e-3
    assert len(calls) > 10, "a call this short must be timed in batches of many calls"
    with pytest.raises(ValueError, match="repeats"):
        kernels.time_per_call(lambda: None, repeats=0)
    with pytest.raises(ValueError, match="min_time"):
        kernels.time_per_call(lambda: None, min_time=0)


def test_square_and_batched_products_report_their_costs_on_the_cpu() -> None:
    squares = kernels.square_products([4, 8], dtype=torch.float32, repeats=1, min_time=1e-4)
    assert [r.size for r in squares] == [4, 8]
    assert (squares[1].flops, squares[1].bytes) == (2 * 8**3, 3 * 8 * 8 * 4)
    assert all(r.seconds > 0 for r in squares)
    batched = kernels.batched_products(16, [1, 3], dtype=torch.float64, repeats=1, min_time=1e-4)
    assert [r.label for r in batched] == ["B = 1", "B = 3"]
    assert batched[1].flops == 2 * 3 * 16 * 16 and batched[1].bytes == (3 * 16 + 16 * 16 + 3 * 16) * 8
    with pytest.raises(ValueError, match="sizes"):
        kernels.square_products([0])
    with pytest.raises(ValueError, match="batch sizes"):
        kernels.batched_products(16, [])
    with pytest.raises(ValueError, match="floating"):
        kernels.square_products([2], dtype=torch.int64)


def test_copy_bandwidth_is_positive_and_refuses_a_size_below_one_number() -> None:
    assert kernels.copy_bandwidth(2**16, repeats=1, min_time=1e-4) > 0
    with pytest.raises(ValueError, match="nbytes"):
        kernels.copy_bandwidth(2)


def test_attention_speed_times_each_path_and_shares_only_a_known_peak() -> None:
    seen = []

    def attend(q, k, v):
        seen.append((q.shape, q.dtype, torch.is_grad_enabled()))
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    rows = kernels.attention_speed({"sdpa": attend}, [8, 16], batch=1, heads=2, d_head=4, causal=True,
                                   dtype=torch.float64, peak_tflops=1.0, repeats=1, min_time=1e-4)
    assert [(r.name, r.T) for r in rows] == [("sdpa", 8), ("sdpa", 16)]
    assert seen[0] == (torch.Size([1, 2, 8, 4]), torch.float64, False), "timed without gradients, as asked"
    for r in rows:
        assert r.tflops == pytest.approx(kernels.attention_flops(1, 2, r.T, 4, True) / (r.ms / 1e3) / 1e12)
        assert r.share == pytest.approx(r.tflops)
    unknown = kernels.attention_speed({"sdpa": attend}, [8], heads=1, d_head=4, repeats=1, min_time=1e-4)
    assert unknown[0].share is None
    assert "-" in kernels.speed_table(unknown).splitlines()[-1]
    with pytest.raises(ValueError, match="lengths"):
        kernels.attention_speed({"sdpa": attend}, [0])


def test_the_tables_give_shares_only_against_a_data_sheet() -> None:
    rows = [kernels.Timed("4 × 4 product", 4, 2e-6, *kernels.product_cost(4, 4, 4, 4))]
    sheet = kernels.data_sheet_roof("NVIDIA H200", torch.float32)
    with_sheet = kernels.products_table(rows, sheet)
    assert "% peak FLOP/s" in with_sheet and "2.0 µs" in with_sheet
    share = 100 * rows[0].flops_per_s / sheet.flops
    assert f"{share:.1f}" in with_sheet.splitlines()[-1]
    measured = kernels.products_table(rows, kernels.Roof(1e9, 1e9, "measured here"))
    assert "% peak" not in measured, "a measured roof is not a peak to take a share of"
    assert math.isfinite(rows[0].intensity)
