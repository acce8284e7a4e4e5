// The CUDA backend's quantization kernels and launchers (cuda/cuda_quant.cuh, cuda_quant.cu) compiled for the CPU and
// run under the kernel model, bitwise against the CPU's quantization (core/int8_quant.h, core/fp8_quant.h): int8 per
// row, to nearest and dithered, and fp8 with one scale per tensor, from fp32 and bf16 storage, with the edge cases
// (zero, tiny, NaN and infinite rows and tensors). And the CPU's fp8 conversion (core/fp8.h) against CUDA's own
// (__nv_cvt_float_to_fp8, saturating, whose host code in cuda_fp8.h the kernel model runs): the same code for a
// million fp32 values spread over every exponent, every fp8 value, and the midpoints between them and their
// neighbours.
#include "kernel_model.h"  // first: the model's definitions come before the kernels

#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/fp8.h"
#include "core/fp8_quant.h"
#include "core/int8_quant.h"
#include "test_rng.h"

#define cuda cuda_model  // the kernel model's launchers (kernel_model_backend.cpp), apart from the CUDA backend's
#include "cuda_ops.h"
#undef cuda

namespace ember {
namespace {

using Floats = std::vector<float>;
using Bf16s = std::vector<__nv_bfloat16>;

Bf16s to_bf16(const Floats& v) {
  Bf16s r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = __float2bfloat16_rn(v[i]);
  return r;
}
Floats widened(const Bf16s& v) {
  Floats r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = __bfloat162float(v[i]);
  return r;
}
TensorIn tensor(const Floats& v) { return TensorIn(v.data()); }
TensorIn tensor(const Bf16s& v) { return TensorIn(reinterpret_cast<const BFloat16*>(v.data())); }

// Bitwise equal floats (NaN equal to NaN).
bool same_bits(float a, float b) { return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); }

TEST(QuantModel, Fp8ConversionIsCudas) {
  for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    const __nv_fp8_interpretation_t kind = f == Fp8Format::e4m3 ? __NV_E4M3 : __NV_E5M2;
    int checked = 0;
    auto check = [&](float x) {
      const uint8_t mine = to_fp8(x, f), theirs = uint8_t(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, kind));
      ++checked;
      if (std::isnan(x))
        EXPECT_TRUE(std::isnan(from_fp8(mine, f)) && std::isnan(from_fp8(theirs, f))) << "NaN";
      else
        ASSERT_EQ(int(mine), int(theirs)) << fp8_format_name(f) << " of " << x;
    };
    for (uint64_t b = 0; b < (uint64_t(1) << 32); b += 4093) check(std::bit_cast<float>(uint32_t(b)));
    std::vector<float> values;  // every finite fp8 value, ascending by magnitude (both signs)
    for (int code = 0; code < 128; ++code)
      if (std::isfinite(from_fp8(uint8_t(code), f))) values.push_back(from_fp8(uint8_t(code), f));
    for (size_t i = 0; i < values.size(); ++i) {
      for (float sign : {1.0f, -1.0f}) {
        const float v = sign * values[i];
        check(v), check(std::nextafter(v, INFINITY)), check(std::nextafter(v, -INFINITY));
        if (i + 1 < values.size()) {
          const float mid = sign * float((double(values[i]) + values[i + 1]) / 2);
          check(mid), check(std::nextafter(mid, INFINITY)), check(std::nextafter(mid, -INFINITY));
        }
      }
    }
    for (float x : {INFINITY, -INFINITY, NAN, 1e30f, -1e30f, 0.0f, -0.0f, 1e-45f}) check(x);
    EXPECT_GT(checked, 1000000);
  }
}

// Rows with scales from 2^-6 to 2^6, then the edge rows: all zeros, a NaN, an infinity, tiny values (the inverse
// overflows), and one huge value among small ones.
Floats int8_rows(int rows, int cols) {
  test::Rng rng(21, 1);
  Floats x = rng.normal(size_t(rows) * cols);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) x[size_t(r) * cols + c] *= std::ldexp(1.0f, r % 13 - 6);
  auto row = [&](int r) { return x.begin() + std::ptrdiff_t(r) * cols; };
  std::fill(row(0), row(1), 0.0f);
  x[size_t(1) * cols + 3] = NAN;
  x[size_t(2) * cols + 5] = -INFINITY;
  std::fill(row(3), row(4), 1e-42f);
  x[size_t(4) * cols + 7] = 3e38f;
  return x;
}

// The launchers write padded operands (row stride ldq >= the values per row, zeros after them and in the rows after
// the real ones): the real values must be the CPU's, bit for bit, and the padding zeros.
constexpr int kPadColumns = 5, kPadRows = 3;

template <typename Storage>
void expect_int8_rows_like_the_cpu(const Storage& x, const Floats& values, int rows, int cols, bool round,
                                   const char* what) {
  const DitherKey key{77, 2, 1234, 321};
  const int ldq = cols + kPadColumns, qrows = rows + kPadRows;
  for (bool dither : {false, true}) {
    std::vector<int8_t> q(size_t(qrows) * ldq, 99), want(values.size());
    Floats scales(size_t(rows), -1.0f), want_scales(size_t(rows), 0.0f);
    cuda_model::launch_quantize_int8_rows(q.data(), ldq, qrows, scales.data(), tensor(x), rows, cols, round,
                                          dither ? &key : nullptr, nullptr);
    if (dither)
      quantize_int8_rows_dithered(values.data(), size_t(rows), size_t(cols), key, want.data(), want_scales.data());
    else
      quantize_int8_rows(values.data(), size_t(rows), size_t(cols), want.data(), want_scales.data());
    for (int r = 0; r < rows; ++r) ASSERT_TRUE(same_bits(scales[r], want_scales[r])) << what << " scale of row " << r;
    for (int r = 0; r < qrows; ++r)
      for (int c = 0; c < ldq; ++c) {
        const int got = q[size_t(r) * ldq + c], expected = r < rows && c < cols ? want[size_t(r) * cols + c] : 0;
        ASSERT_EQ(got, expected) << what << (dither ? " dithered" : " nearest") << " at (" << r << ", " << c << ")";
      }
  }
}

// Per column into q transposed: column c of x is row c of q. The dithered draws start at `first`.
template <typename Storage>
void expect_int8_columns_like_the_cpu(const Storage& x, const Floats& values, int rows, int cols, bool round,
                                      const char* what) {
  const DitherKey key{78, 3, 99, 4};
  const uint64_t first = 1000003;
  const int ldq = rows + kPadColumns, qrows = cols + kPadRows;
  for (bool dither : {false, true}) {
    std::vector<int8_t> q(size_t(qrows) * ldq, 99), want(values.size());
    Floats scales(size_t(cols), -1.0f), want_scales(size_t(cols), 0.0f);
    cuda_model::launch_quantize_int8_columns_transposed(q.data(), ldq, qrows, scales.data(), tensor(x), rows, cols,
                                                        round, dither ? &key : nullptr, first, nullptr);
    if (dither)
      quantize_int8_columns_dithered(values.data(), size_t(rows), size_t(cols), key, first, want.data(),
                                     want_scales.data());
    else
      quantize_int8_columns(values.data(), size_t(rows), size_t(cols), want.data(), want_scales.data());
    for (int c = 0; c < cols; ++c)
      ASSERT_TRUE(same_bits(scales[c], want_scales[c])) << what << " scale of column " << c;
    for (int c = 0; c < qrows; ++c)
      for (int r = 0; r < ldq; ++r) {
        const int got = q[size_t(c) * ldq + r], expected = c < cols && r < rows ? want[size_t(r) * cols + c] : 0;
        ASSERT_EQ(got, expected) << what << (dither ? " dithered" : " nearest") << " column " << c << " row " << r;
      }
  }
}

Floats bf16_rounded(const Floats& x) {
  Floats r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = __bfloat162float(__float2bfloat16_rn(x[i]));
  return r;
}

// Rows of 301 values (odd: rows start at every offset of a Philox block), read once into registers; rows that fill
// the registers of every thread but for their padding (8190: the padding lies past them), and longer rows (8229),
// read twice.
TEST(QuantModel, Int8RowsAreTheCpusBitwise) {
  for (const auto& [rows, cols] : {std::pair{29, 301}, std::pair{6, 8190}, std::pair{6, 8229}}) {
    SCOPED_TRACE("rows of " + std::to_string(cols));
    const Floats x = int8_rows(rows, cols);
    expect_int8_rows_like_the_cpu(x, x, rows, cols, false, "fp32");
    expect_int8_rows_like_the_cpu(x, bf16_rounded(x), rows, cols, true, "fp32 read as bf16");
    const Bf16s x16 = to_bf16(x);
    expect_int8_rows_like_the_cpu(x16, widened(x16), rows, cols, false, "bf16");
  }
}

// Columns: the same edge rows, as columns (x transposed), across more than one block of columns and more than one
// tile of rows.
// Columns of 71 and 251 rows (q's rows of 76 and 256 with their padding) are held in registers; of 300, read twice.
TEST(QuantModel, Int8ColumnsTransposedAreTheCpusBitwise) {
  for (const auto& [rows, cols] : {std::pair{71, 45}, std::pair{251, 40}, std::pair{300, 37}}) {
    SCOPED_TRACE("columns of " + std::to_string(rows));
    const Floats t = int8_rows(cols, rows);  // row c of t is column c of x
    Floats x(t.size());
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) x[size_t(r) * cols + c] = t[size_t(c) * rows + r];
    expect_int8_columns_like_the_cpu(x, x, rows, cols, false, "fp32");
    expect_int8_columns_like_the_cpu(x, bf16_rounded(x), rows, cols, true, "fp32 read as bf16");
    const Bf16s x16 = to_bf16(x);
    expect_int8_columns_like_the_cpu(x16, widened(x16), rows, cols, false, "bf16");
  }
}

template <typename Storage>
void expect_fp8_like_the_cpu(const Storage& x, const Floats& values, const std::string& what) {
  Floats partial(cuda_model::kFp8AmaxBlocks, -1.0f);
  for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    std::vector<uint8_t> q(values.size(), 0x55), want(values.size());
    Floats scale_inverse = {-1.0f, -1.0f};
    cuda_model::launch_quantize_fp8(q.data(), scale_inverse.data(), partial.data(), tensor(x), values.size(), f,
                                    nullptr);
    const float scale = quantize_fp8_tensor(values.data(), values.size(), f, want.data());
    ASSERT_TRUE(same_bits(scale_inverse[0], scale))
        << what << " " << fp8_format_name(f) << ": scale " << scale_inverse[0] << " vs " << scale;
    for (size_t i = 0; i < q.size(); ++i)
      ASSERT_EQ(int(q[i]), int(want[i])) << what << " " << fp8_format_name(f) << " at " << i;
  }
}

TEST(QuantModel, Fp8TensorsAreTheCpusBitwise) {
  test::Rng rng(22, 1);
  Floats x = rng.normal(70001, 3e-3f);
  x[12345] = -0.75f;  // the largest magnitude
  expect_fp8_like_the_cpu(x, x, "fp32");
  const Bf16s x16 = to_bf16(x);
  expect_fp8_like_the_cpu(x16, widened(x16), "bf16");
  const Floats small = rng.normal(300, 1e-20f);  // a tensor whose values fall far below the formats' ranges: scaled up
  expect_fp8_like_the_cpu(small, small, "tiny values");
  const Floats zeros(1000, 0.0f);
  expect_fp8_like_the_cpu(zeros, zeros, "zeros");
  for (float bad : {NAN, INFINITY}) {
    Floats y = rng.normal(5000);
    y[4321] = bad;
    expect_fp8_like_the_cpu(y, y, std::isnan(bad) ? "a NaN" : "an infinity");
  }
}

// fp8 as the dense layers' products lay it out: the tensor's scale over its bf16-rounded values (fp32 storage read as
// bf16), then the codes padded, as they are and transposed (through shared-memory tiles: sizes past one tile in both
// directions), against the CPU's quantization of the rounded values; also unscaled (scale 1).
TEST(QuantModel, Fp8OperandLayoutsAreTheCpusBitwise) {
  const int rows = 45, cols = 70, ldq_pad = 10, qrows_pad = 6;
  test::Rng rng(23, 1);
  Floats x = rng.normal(size_t(rows) * cols, 0.02f);
  x[77] = 3.0f;
  const Floats rounded = bf16_rounded(x);
  Floats partial(cuda_model::kFp8AmaxBlocks);
  for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2})
    for (bool scaled : {true, false}) {
      std::vector<uint8_t> want(x.size());
      const float scale = scaled ? quantize_fp8_tensor(rounded.data(), rounded.size(), f, want.data())
                                 : quantize_fp8_unscaled(rounded.data(), rounded.size(), f, want.data());
      Floats scale_inverse = {-1.0f, -1.0f};
      cuda_model::launch_fp8_tensor_scale(scale_inverse.data(), partial.data(), tensor(x), x.size(), f, true, scaled,
                                          nullptr);
      const std::string what = std::string(fp8_format_name(f)) + (scaled ? "" : " unscaled");
      ASSERT_TRUE(same_bits(scale_inverse[0], scale)) << what << ": scale " << scale_inverse[0] << " vs " << scale;
      for (bool transposed : {false, true}) {
        const int ldq = (transposed ? rows : cols) + ldq_pad, qrows = (transposed ? cols : rows) + qrows_pad;
        std::vector<uint8_t> q(size_t(qrows) * ldq, 0x55);
        cuda_model::launch_fp8_codes(q.data(), ldq, qrows, tensor(x), rows, cols, transposed, true,
                                     scale_inverse.data(), f, nullptr);
        for (int i = 0; i < qrows; ++i)
          for (int j = 0; j < ldq; ++j) {
            const int r = transposed ? j : i, c = transposed ? i : j;  // q's (i, j) holds x's (r, c)
            const int expected = r < rows && c < cols ? want[size_t(r) * cols + c] : 0;
            ASSERT_EQ(int(q[size_t(i) * ldq + j]), expected)
                << what << (transposed ? " transposed" : "") << " at (" << i << ", " << j << ")";
          }
      }
    }
}

}  // namespace
}  // namespace ember
