// kernels/gemv.cu on the host (see run.sh): the SIMT build (1-8 rows) and the tensor-core
// build (1-32 rows; mma.sync stood in for by common.cuh here, warp-wide) against the
// product in double over the same bf16 values, with and without a bias, over widths that
// split unevenly between a block's warps and output counts that end inside a tile; and a
// row's result the same bits whatever the number of rows beside it.
#include <cstdio>
#include <random>
#include <vector>

#include "expect.h"
#include "gemv.cu"

namespace {
using emu::expect;
using emu::failures;

void run(int k, int out, bool with_bias) {
  std::mt19937 rng(k * 7 + out);
  std::normal_distribution<float> g(0.f, 1.f);
  const int max_n = 32;
  std::vector<__nv_bfloat16> x(static_cast<size_t>(max_n) * k), w(static_cast<size_t>(out) * k);
  for (auto& v : x) v = __float2bfloat16(g(rng));
  for (auto& v : w) v = __float2bfloat16(g(rng) * 0.05f);
  std::vector<float> bias(out);
  for (auto& v : bias) v = g(rng);
  const float* bp = with_bias ? bias.data() : nullptr;
  std::vector<double> ref(static_cast<size_t>(max_n) * out);
  for (int r = 0; r < max_n; ++r)
    for (int o = 0; o < out; ++o) {
      double s = with_bias ? bias[o] : 0.0;
      for (int i = 0; i < k; ++i)
        s += double(__bfloat162float(x[size_t(r) * k + i])) * __bfloat162float(w[size_t(o) * k + i]);
      ref[size_t(r) * out + o] = s;
    }
  const auto worst = [&](const std::vector<float>& y, int n) {
    double e = 0;
    for (int r = 0; r < n; ++r)
      for (int o = 0; o < out; ++o) {
        const double d = ref[size_t(r) * out + o];
        e = std::max(e, std::abs(y[size_t(r) * out + o] - d) / (std::abs(d) + 1.0));
      }
    return e;
  };
  char what[160];
  // The tensor-core build: every row count against the reference; each row's bits equal
  // to the same row computed alone.
  std::vector<float> alone(static_cast<size_t>(max_n) * out);
  for (int r = 0; r < max_n; ++r) {
    std::vector<float> y(out, -1.f);
    ifd_gemv_mma(x.data() + size_t(r) * k, w.data(), bp, y.data(), 1, k, out, nullptr);
    std::copy(y.begin(), y.end(), alone.begin() + size_t(r) * out);
  }
  for (int n : {1, 3, 8, 9, 16, 17, 32}) {
    std::vector<float> y(static_cast<size_t>(n) * out + 1, -7.f);
    const int rc = ifd_gemv_mma(x.data(), w.data(), bp, y.data(), n, k, out, nullptr);
    std::snprintf(what, sizeof what, "gemv_mma k %d out %d n %d: returns 0", k, out, n);
    expect(rc == 0, what, rc);
    const double e = worst(y, n);
    std::snprintf(what, sizeof what, "gemv_mma k %d out %d n %d bias %d: relative error", k, out, n, with_bias);
    expect(e < 1e-5, what, e, 1e-5);
    bool same = std::memcmp(y.data(), alone.data(), sizeof(float) * size_t(n) * out) == 0;
    std::snprintf(what, sizeof what, "gemv_mma k %d out %d n %d: rows equal alone", k, out, n);
    expect(same, what);
    std::snprintf(what, sizeof what, "gemv_mma k %d out %d n %d: nothing written past y", k, out, n);
    expect(y.back() == -7.f, what);
  }
  // The SIMT build.
  for (int n : {1, 2, 5, 8}) {
    std::vector<float> y(static_cast<size_t>(n) * out, -1.f);
    ifd_gemv(x.data(), w.data(), bp, y.data(), n, k, out, 16, nullptr);
    const double e = worst(y, n);
    std::snprintf(what, sizeof what, "gemv (SIMT) k %d out %d n %d: relative error", k, out, n);
    expect(e < 1e-5, what, e, 1e-5);
  }
}
}  // namespace

int main() {
  run(128, 40, true);    // 2 chunks over 8 warps: six warps add nothing
  run(576, 50, false);   // SmolLM2's width: 9 chunks, 8 warps
  run(1024, 16, true);   // one tile, 2 chunks a warp
  run(640, 37, false);   // 10 chunks, out ending 5 into a tile
  std::printf("gemv emulation: %s (%d failures)\n", failures ? "FAILED" : "passed", failures);
  return failures ? 1 : 0;
}
