// kernels/gemv.cu on the host (see run.sh): the matrix-vector kernel at 1-8 rows against
// the product in double over the same bf16 values, with and without a bias, over widths
// that leave a lane's last loads short and output counts that end inside a block; and the
// product's SwiGLU in its kernel (ifd_gemv_swiglu) against the product then SwiGLU.
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
  const int max_n = 8;
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
  for (int n : {1, 2, 5, 8}) {
    std::vector<float> y(static_cast<size_t>(n) * out, -1.f);
    ifd_gemv(x.data(), w.data(), bp, y.data(), n, k, out, 16, 0, nullptr);
    const double e = worst(y, n);
    std::snprintf(what, sizeof what, "gemv k %d out %d n %d bias %d: relative error", k, out, n, with_bias);
    expect(e < 1e-5, what, e, 1e-5);
    // Added to a residual stream: each value is the stream's plus the product just made,
    // as one f32 sum (what add_rms_norm's x + y gives).
    std::vector<float> res(y.size());
    for (size_t i = 0; i < res.size(); ++i) res[i] = g(rng) * 4.f;
    std::vector<float> sum = res;
    ifd_gemv(x.data(), w.data(), bp, sum.data(), n, k, out, 16, 1, nullptr);
    int off = 0;
    for (size_t i = 0; i < res.size(); ++i) off += sum[i] != res[i] + y[i];
    std::snprintf(what, sizeof what, "gemv k %d out %d n %d bias %d: added to a stream, off", k, out, n, with_bias);
    expect(off == 0, what, off, 0);
  }
}
// SwiGLU in the product's kernel against the product, then SwiGLU of its f32 output (what
// ifd_swiglu computes), bit for bit: f columns whose last block is partly empty, a bias.
void swiglu(int k, int f, bool with_bias) {
  std::mt19937 rng(k * 13 + f);
  std::normal_distribution<float> g(0.f, 1.f);
  const int max_n = 8;
  std::vector<__nv_bfloat16> x(static_cast<size_t>(max_n) * k), w(static_cast<size_t>(2 * f) * k);
  for (auto& v : x) v = __float2bfloat16(g(rng));
  for (auto& v : w) v = __float2bfloat16(g(rng) * 0.05f);
  std::vector<float> bias(2 * f);
  for (auto& v : bias) v = g(rng);
  const float* bp = with_bias ? bias.data() : nullptr;
  char what[160];
  for (int n : {1, 2, 5, 8}) {
    std::vector<float> y(static_cast<size_t>(n) * 2 * f);
    ifd_gemv(x.data(), w.data(), bp, y.data(), n, k, 2 * f, 16, 0, nullptr);
    std::vector<__nv_bfloat16> out(static_cast<size_t>(n) * f, __float2bfloat16(-7.f));
    const int e = ifd_gemv_swiglu(x.data(), w.data(), bp, out.data(), n, k, f, 16, nullptr);
    int off = e != 0;
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < f; ++c) {
        const float* yr = y.data() + static_cast<size_t>(r) * 2 * f;
        const __nv_bfloat16 want = __float2bfloat16(ifd::silu_mul(yr[c], yr[f + c]));
        off += __bfloat162float(out[static_cast<size_t>(r) * f + c]) != __bfloat162float(want);
      }
    std::snprintf(what, sizeof what, "gemv_swiglu k %d f %d n %d bias %d: values off", k, f, n, with_bias);
    expect(off == 0, what, off, 0);
  }
}
}  // namespace

int main() {
  run(128, 40, true);    // 16 loads a row: half the lanes idle
  run(576, 50, false);   // SmolLM2's width
  run(8192, 16, true);   // two rounds of 16 loads a lane
  run(4168, 37, false);  // a round, then a short tail; out ending 5 into a block
  run(12288, 29, true);  // the 8B's down projection's rows: three rounds of 16 loads a lane
  swiglu(576, 37, true);     // the last block's columns partly past f
  swiglu(4168, 40, false);   // a round, then a short tail
  std::printf("gemv emulation: %s (%d failures)\n", failures ? "FAILED" : "passed", failures);
  return failures ? 1 : 0;
}
