// kernels/chain.cu on the host (see run.sh): chains of products in one persistent kernel,
// its blocks run side by side (ifd::launch_cooperative here), against gemv.cu's kernel on
// the same inputs, bit for bit: each step's x the step before's y rounded to bf16, steps
// whose rows are fewer than the grid's warps (some warps stream nothing), rows shorter than
// a piece and rows of several pieces, a residual added to, every ring depth asked; every
// block through every barrier, every row claimed.
#include <cstdio>
#include <random>
#include <vector>

#include "expect.h"
#include "gemv.cu"
#include "chain.cu"

namespace {
using emu::expect;
using emu::failures;

struct Shape {
  int k, out, add;
};

void run(const std::vector<Shape>& shapes, int stages, int piece) {
  std::mt19937 rng(shapes.size() * 31 + stages * 7 + piece);
  std::normal_distribution<float> g(0.f, 1.f);
  const int n = static_cast<int>(shapes.size());
  int max_k = 0;
  for (const Shape& s : shapes) max_k = std::max(max_k, s.k);
  std::vector<float> x0(max_k);
  for (auto& v : x0) v = g(rng);
  std::vector<std::vector<__nv_bfloat16>> w(n);
  std::vector<std::vector<float>> y(n), start(n);
  std::vector<IfdChainStep> steps(n);
  for (int i = 0; i < n; ++i) {
    const Shape& s = shapes[i];
    if (i > 0 && s.k > shapes[i - 1].out) std::abort();  // x is the y before's first k
    w[i].resize(static_cast<size_t>(s.k) * s.out);
    for (auto& v : w[i]) v = __float2bfloat16(g(rng) / std::sqrt(float(s.k)));
    start[i].resize(s.out);
    for (auto& v : start[i]) v = s.add ? g(rng) : -1.f;
    y[i] = start[i];
    steps[i] = IfdChainStep{w[i].data(), i == 0 ? x0.data() : y[i - 1].data(), y[i].data(), s.k, s.out, s.add, 0};
  }
  std::vector<unsigned> counters(2 * n, 0);
  const int e = ifd_chain(steps.data(), n, stages, piece, max_k, counters.data(), 1, nullptr);
  char what[160];
  std::snprintf(what, sizeof what, "chain of %d, %d x %d B: launch", n, stages, piece);
  expect(e == 0, what, e, 0);
  // Each step by the wave kernel, on the bf16 rounding of the chain's own x.
  for (int i = 0; i < n; ++i) {
    const Shape& s = shapes[i];
    const float* x = i == 0 ? x0.data() : y[i - 1].data();
    std::vector<__nv_bfloat16> xb(s.k);
    for (int j = 0; j < s.k; ++j) xb[j] = __float2bfloat16(x[j]);
    std::vector<float> ref = start[i];
    ifd_gemv(xb.data(), w[i].data(), nullptr, ref.data(), 1, s.k, s.out, 16, s.add, nullptr);
    int off = 0;
    for (int o = 0; o < s.out; ++o) off += ref[o] != y[i][o];
    std::snprintf(what, sizeof what, "chain of %d, %d x %d B: step %d (k %d, out %d, add %d) rows off",
                  n, stages, piece, i, s.k, s.out, s.add);
    expect(off == 0, what, off, 0);
  }
  // Every block passed every step's barrier.
  int short_count = 0;
  for (int i = 0; i + 1 < n; ++i) short_count += counters[i] != static_cast<unsigned>(emu_sm_count);
  // Every row claimed once: a step's claims are its rows and one more a warp that looked
  // for another (each warp moves past a step when its claim comes back too large).
  int claims_off = 0;
  for (int i = 0; i < n; ++i)
    claims_off += counters[n + i] < static_cast<unsigned>(shapes[i].out) ||
                  counters[n + i] > static_cast<unsigned>(shapes[i].out + emu_sm_count * 8);
  std::snprintf(what, sizeof what, "chain of %d, %d x %d B: steps whose claims are off", n, stages, piece);
  expect(claims_off == 0, what, claims_off, 0);
  std::snprintf(what, sizeof what, "chain of %d, %d x %d B: barriers not reached by every block", n, stages, piece);
  expect(short_count == 0, what, short_count, 0);
}
}  // namespace

int main() {
  // 3 blocks of 8 warps: 24 warps.
  const std::vector<Shape> chain = {
      {512, 300, 0},    // rows shorter than a piece
      {296, 1500, 0},   // 1500 rows over 24 warps
      {1496, 40, 1},    // rows of a piece and a short one, added to a stream
      {40, 16, 0},      // fewer rows than warps
      {16, 2400, 1},    // a row of 32 bytes
      {2400, 7, 0},     // rows of two pieces of 4 KB (the second short); most warps idle
  };
  for (int stages : {1, 5}) run(chain, stages, 4096);
  run(chain, 3, 8192);
  emu_sm_count = 1;  // one block: its barriers wait for itself
  run(chain, 2, 4096);
  std::printf("chain emulation: %s (%d failures)\n", failures ? "FAILED" : "passed", failures);
  return failures ? 1 : 0;
}
