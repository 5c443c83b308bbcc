// The 16-byte paths of kernels/norm.cu (rms_norm, add_rms_norm) and kernels/fused.cu
// (qkv_prep) run on the host (see run.sh) against the one-value-a-thread kernels they
// replace, which the same entry points still take for rows they cannot load 16 bytes at a
// time: the same inputs are given once aligned and once one float off, so each call goes
// down one path. SwiGLU (both widths) is checked against the formula. Shapes: the model
// widths of SmolLM2 (576), Qwen3-8B (4096) and one past the 16-byte path's register
// budget; heads of 64, 128 and 256 values, NeoX and interleaved rotation, whole and
// partial rotary, with and without QK-norm, q in f32 and bf16.
#include <cstdio>
#include <random>
#include <utility>
#include <vector>

#include "fused.cu"
#include "norm.cu"

#include "expect.h"

namespace {
using emu::expect;
using emu::failures;

// A buffer holding `n` floats at `data()`, 16-byte aligned, or one float past that.
struct Buf {
  std::vector<float4> store;
  bool shifted;
  Buf(size_t n, bool shift) : store(n / 4 + 2), shifted(shift) {}
  float* data() { return reinterpret_cast<float*>(store.data()) + (shifted ? 1 : 0); }
};

std::vector<float> randn(size_t n, unsigned seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = g(rng);
  return v;
}

// Largest difference of two bf16 arrays in units of the larger's last place, and of f32
// arrays relative to their magnitude.
double bf16_ulps(const bf16* a, const bf16* b, size_t n) {
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    const double x = __bfloat162float(a[i]), y = __bfloat162float(b[i]);
    const double ulp = std::max(std::abs(x), std::abs(y)) / 128.0 + 1e-30;
    worst = std::max(worst, std::abs(x - y) / ulp);
  }
  return worst;
}
double f32_rel(const float* a, const float* b, size_t n) {
  double worst = 0;
  for (size_t i = 0; i < n; ++i)
    worst = std::max(worst, std::abs(double(a[i]) - b[i]) / (std::abs(double(b[i])) + 1e-3));
  return worst;
}

void norms(int rows, int cols) {
  const size_t n = static_cast<size_t>(rows) * cols;
  const auto x0 = randn(n, cols, 2.f), y0 = randn(n, cols + 1), w0 = randn(cols, cols + 2);
  for (bool residual : {false, true}) {
    std::vector<float> xs[2];
    std::vector<bf16> outs[2];
    for (int shift = 0; shift < 2; ++shift) {
      Buf x(n, shift), y(n, shift), w(cols, shift);
      std::copy(x0.begin(), x0.end(), x.data());
      std::copy(y0.begin(), y0.end(), y.data());
      std::copy(w0.begin(), w0.end(), w.data());
      outs[shift].resize(n);
      if (residual)
        expect(ifd_add_rms_norm(x.data(), y.data(), w.data(), rows, cols, 1e-6f,
                                outs[shift].data(), nullptr) == 0, "add_rms_norm");
      else
        expect(ifd_rms_norm(x.data(), w.data(), rows, cols, 1e-6f, outs[shift].data(),
                            nullptr) == 0, "rms_norm");
      xs[shift].assign(x.data(), x.data() + n);
    }
    char what[96];
    std::snprintf(what, sizeof what, "%s %d x %d: 16-byte path against the scalar one",
                  residual ? "add_rms_norm" : "rms_norm", rows, cols);
    // The sums of squares add in another order: at most one bf16 place apart.
    const double ulps = bf16_ulps(outs[0].data(), outs[1].data(), n);
    expect(ulps <= 1.0, what, ulps, 1.0);
    // The residual sum itself is exact either way.
    expect(xs[0] == xs[1], "the residual stream written back");
    std::printf("%s: %.2f places\n", what, ulps);
  }
}

// SwiGLU from f32 input, and from the same values rounded to bf16 (the fused gate|up
// product stored narrow): each against the formula over the values it was given.
void swiglu(int rows, int f) {
  const auto gu = randn(static_cast<size_t>(rows) * 2 * f, f, 3.f);
  for (int in_bf16 = 0; in_bf16 < 2; ++in_bf16) {
    Buf in(gu.size(), false);
    std::vector<bf16> in16(gu.size());
    std::vector<float> given(gu.size());
    for (size_t i = 0; i < gu.size(); ++i) {
      in16[i] = __float2bfloat16(gu[i]);
      given[i] = in_bf16 ? __bfloat162float(in16[i]) : gu[i];
      in.data()[i] = gu[i];
    }
    std::vector<bf16> out(static_cast<size_t>(rows) * f);
    const void* src = in_bf16 ? static_cast<const void*>(in16.data()) : in.data();
    expect(ifd_swiglu(src, in_bf16, rows, f, out.data(), nullptr) == 0, "swiglu");
    int wrong = 0;
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < f; ++c) {
        const float x = given[static_cast<size_t>(r) * 2 * f + c];
        const float u = given[static_cast<size_t>(r) * 2 * f + f + c];
        const bf16 want = __float2bfloat16(x / (1.f + __expf(-x)) * u);
        wrong += want.bits != out[static_cast<size_t>(r) * f + c].bits;
      }
    char what[80];
    std::snprintf(what, sizeof what, "swiglu %d x %d, %s in: values off the formula", rows, f,
                  in_bf16 ? "bf16" : "f32");
    expect(wrong == 0, what, wrong, 0);
    std::printf("%s: %d\n", what, wrong);
  }
}

struct Heads {
  int hq, hkv, d, half, neox;
  bool norm, q_bf16;
};

// Rotary cos / sin tables [positions, half] (base 10000).
std::pair<std::vector<float>, std::vector<float>> rope_tables(int positions, int half) {
  std::vector<float> c(static_cast<size_t>(positions) * half), s(c.size());
  for (int p = 0; p < positions; ++p)
    for (int j = 0; j < half; ++j) {
      const double a = p * std::pow(10000.0, -2.0 * j / (2 * half));
      c[p * half + j] = static_cast<float>(std::cos(a));
      s[p * half + j] = static_cast<float>(std::sin(a));
    }
  return {c, s};
}

void qkv(int rows, const Heads& h) {
  const int width = (h.hq + 2 * h.hkv) * h.d, positions = rows + 3;
  const size_t n = static_cast<size_t>(rows) * width;
  const auto src = randn(n, h.d * 7 + h.half, 1.5f);
  const auto qn0 = randn(h.d, 11), kn0 = randn(h.d, 12);
  const auto [cos_tab, sin_tab] = rope_tables(positions, h.half);
  std::vector<int32_t> pos(rows);
  for (int r = 0; r < rows; ++r) pos[r] = (r * 5 + 2) % positions;
  const size_t nq = static_cast<size_t>(rows) * h.hq * h.d, nk = static_cast<size_t>(rows) * h.hkv * h.d;
  std::vector<float> q32[2], k[2], v[2];
  std::vector<bf16> q16[2];
  for (int shift = 0; shift < 2; ++shift) {
    Buf in(n, shift), qn(h.d, shift), kn(h.d, shift), qo(nq, shift), ko(nk, shift), vo(nk, shift);
    std::copy(src.begin(), src.end(), in.data());
    std::copy(qn0.begin(), qn0.end(), qn.data());
    std::copy(kn0.begin(), kn0.end(), kn.data());
    std::vector<bf16> qb(nq + 4);
    void* q = h.q_bf16 ? static_cast<void*>(qb.data() + shift) : static_cast<void*>(qo.data());
    expect(ifd_qkv_prep(in.data(), 0, rows, h.hq, h.hkv, h.d, h.norm ? qn.data() : nullptr,
                        h.norm ? kn.data() : nullptr, 1e-6f, h.half, h.neox, pos.data(),
                        cos_tab.data(), sin_tab.data(), q, h.q_bf16, ko.data(), vo.data(),
                        nullptr, nullptr, nullptr) == 0, "qkv_prep");
    q32[shift].assign(qo.data(), qo.data() + nq);
    q16[shift].assign(qb.data() + shift, qb.data() + shift + nq);
    k[shift].assign(ko.data(), ko.data() + nk);
    v[shift].assign(vo.data(), vo.data() + nk);
  }
  char what[128];
  std::snprintf(what, sizeof what, "qkv_prep %d rows, %d/%d heads of %d, rotary %d%s%s%s", rows,
                h.hq, h.hkv, h.d, 2 * h.half, h.neox ? " neox" : " interleaved",
                h.norm ? ", QK-norm" : "", h.q_bf16 ? ", q bf16" : "");
  // QK-norm's sum adds in another order; without it the paths are equal.
  const double lim = h.norm ? 1e-5 : 0.0;
  const double dk = f32_rel(k[0].data(), k[1].data(), nk);
  const double dq = h.q_bf16 ? bf16_ulps(q16[0].data(), q16[1].data(), nq) / 128.0
                             : f32_rel(q32[0].data(), q32[1].data(), nq);
  expect(dk <= lim, what, dk, lim);
  expect(dq <= (h.q_bf16 && h.norm ? 1.0 / 128 : lim), what, dq, lim);
  expect(v[0] == v[1], "v copied");
  std::printf("%s: q %.2e, k %.2e\n", what, dq, dk);
}
// qkv_prep's 16-byte path in a pass of more rows than its early reads take (a prompt
// pass) gives its first rows the bits it gives them in a pass of those rows alone (which
// reads the weights, angles and slots before its wait).
void qkv_early(int rows, const Heads& h) {
  const int width = (h.hq + 2 * h.hkv) * h.d, positions = rows + 3, few = 5;
  const auto src = randn(static_cast<size_t>(rows) * width, h.d * 5 + 1, 1.5f);
  const auto qn = randn(h.d, 21), kn = randn(h.d, 22);
  const auto [cos_tab, sin_tab] = rope_tables(positions, h.half);
  std::vector<int32_t> pos(rows);
  for (int r = 0; r < rows; ++r) pos[r] = (r * 7 + 1) % positions;
  const size_t nq = static_cast<size_t>(h.hq) * h.d, nk = static_cast<size_t>(h.hkv) * h.d;
  std::vector<float> q[2], k[2], v[2];
  for (int pass = 0; pass < 2; ++pass) {
    const int n = pass == 0 ? rows : few;
    q[pass].assign(n * nq, -1.f), k[pass].assign(n * nk, -1.f), v[pass].assign(n * nk, -1.f);
    expect(ifd_qkv_prep(src.data(), 0, n, h.hq, h.hkv, h.d, h.norm ? qn.data() : nullptr,
                        h.norm ? kn.data() : nullptr, 1e-6f, h.half, h.neox, pos.data(),
                        cos_tab.data(), sin_tab.data(), q[pass].data(), 0, k[pass].data(),
                        v[pass].data(), nullptr, nullptr, nullptr) == 0, "qkv_prep");
  }
  int off = 0;
  for (size_t i = 0; i < few * nq; ++i) off += q[0][i] != q[1][i];
  for (size_t i = 0; i < few * nk; ++i) off += k[0][i] != k[1][i] || v[0][i] != v[1][i];
  char what[128];
  std::snprintf(what, sizeof what, "qkv_prep, %d rows of %d alone (early reads) against in a pass of %d: values off", few, rows, rows);
  expect(off == 0, what, off, 0);
  std::printf("%s: %d\n", what, off);
}
}  // namespace

// qkv_prep from a bf16 product gives the bits it gives from the same values in f32, on
// each path (4 values a lane from aligned input, one at a time from input one value off),
// with q written in f32 and in bf16 (what a narrow product's pass writes).
void qkv_bf16_input(int rows, const Heads& h) {
  const int width = (h.hq + 2 * h.hkv) * h.d, positions = rows + 3;
  const size_t n = static_cast<size_t>(rows) * width;
  auto src = randn(n, h.d * 5 + 1, 1.5f);
  std::vector<bf16> src16(n + 4);
  for (size_t i = 0; i < n; ++i) src[i] = __bfloat162float(src16[i] = __float2bfloat16(src[i]));
  const auto qn0 = randn(h.d, 11), kn0 = randn(h.d, 12);
  Buf qn(h.d, false), kn(h.d, false);
  std::copy(qn0.begin(), qn0.end(), qn.data());
  std::copy(kn0.begin(), kn0.end(), kn.data());
  std::vector<float> cos_tab(static_cast<size_t>(positions) * h.half, 0.6f),
      sin_tab(cos_tab.size(), 0.8f);
  std::vector<int32_t> pos(rows);
  for (int r = 0; r < rows; ++r) pos[r] = (r * 3 + 1) % positions;
  const size_t nq = static_cast<size_t>(rows) * h.hq * h.d, nk = static_cast<size_t>(rows) * h.hkv * h.d;
  for (int q_bf16 = 0; q_bf16 < 2; ++q_bf16)
    for (int shift = 0; shift < 2; ++shift) {
      std::vector<uint32_t> outs[2];  // q's bits (f32, or bf16 widened), then k's and v's
      for (int in_bf16 = 0; in_bf16 < 2; ++in_bf16) {
        Buf in(n, shift), qo(nq, false), ko(nk, false), vo(nk, false);
        std::copy(src.begin(), src.end(), in.data());
        std::vector<bf16> shifted(n + 4), q16(nq + 4);
        std::copy(src16.begin(), src16.begin() + n, shifted.begin() + shift);
        const void* x = in_bf16 ? static_cast<const void*>(shifted.data() + shift) : in.data();
        void* q = q_bf16 ? static_cast<void*>(q16.data()) : static_cast<void*>(qo.data());
        expect(ifd_qkv_prep(x, in_bf16, rows, h.hq, h.hkv, h.d, h.norm ? qn.data() : nullptr,
                            h.norm ? kn.data() : nullptr, 1e-6f, h.half, h.neox, pos.data(),
                            cos_tab.data(), sin_tab.data(), q, q_bf16, ko.data(), vo.data(),
                            nullptr, nullptr, nullptr) == 0, "qkv_prep");
        auto& o = outs[in_bf16];
        for (size_t i = 0; i < nq; ++i) {
          uint32_t b;
          std::memcpy(&b, qo.data() + i, 4);
          o.push_back(q_bf16 ? q16[i].bits : b);
        }
        for (const float* t : {ko.data(), vo.data()})
          for (size_t i = 0; i < nk; ++i) {
            uint32_t b;
            std::memcpy(&b, t + i, 4);
            o.push_back(b);
          }
      }
      char what[128];
      std::snprintf(what, sizeof what, "qkv_prep from bf16, %d/%d heads of %d%s, q %s, %s path",
                    h.hq, h.hkv, h.d, h.norm ? ", QK-norm" : "", q_bf16 ? "bf16" : "f32",
                    shift ? "one value" : "4 values");
      int differ = 0;
      for (size_t i = 0; i < outs[0].size(); ++i) differ += outs[0][i] != outs[1][i];
      expect(differ == 0, what, differ, 0);
      std::printf("%s: %d values differ from f32 input\n", what, differ);
    }
}

int main() {
  for (int cols : {576, 4096, 16388}) norms(3, cols);
  norms(2, 18);  // under one warp of groups
  swiglu(3, 1536);
  swiglu(2, 37);  // not a multiple of 4: one value a thread
  qkv(5, {4, 2, 128, 64, 1, true, true});    // Qwen3
  qkv_early(130, {4, 2, 128, 64, 1, true, true});
  qkv(4, {4, 2, 128, 64, 1, true, false});
  qkv(3, {3, 1, 64, 32, 1, false, false});   // SmolLM2-like, no QK-norm
  qkv(3, {2, 2, 64, 32, 0, false, true});    // interleaved pairs
  qkv(3, {4, 1, 256, 32, 1, true, true});    // Qwen3.5: partial rotary
  qkv_bf16_input(3, {4, 2, 128, 64, 1, true, false});
  qkv_bf16_input(2, {3, 1, 64, 32, 0, false, false});
  std::printf(failures ? "elementwise: %d failures\n" : "elementwise: all passed\n", failures);
  return failures ? 1 : 0;
}
