// Host emulation of kernels/delta_net.cu's convolution kernels (grid-stride loops run with one
// thread): pieces of 6, 1, 1 and 4 tokens through the conv state against the direct
// convolution, with a padding row (no slot) beside them and stale state at position 0.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstddef>
#include <vector>
#include <algorithm>
struct Dim { int x = 0, y = 0, z = 0; };
Dim threadIdx{0,0,0}, blockIdx{0,0,0}, blockDim{1,1,1}, gridDim{1,1,1};
#define __restrict__
#include "conv.inc"
int main() {
  const int dim = 5, taps = 4, hist = 3, total = 12;
  std::vector<float> xs(total * dim), w(dim * taps);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(i * 1.3f);
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::cos(i * 0.7f);
  // direct
  std::vector<float> want(total * dim);
  for (int t = 0; t < total; ++t) for (int c = 0; c < dim; ++c) {
    float acc = 0; for (int i = 0; i < taps; ++i) { int s = t - hist + i; if (s >= 0) acc += w[c * taps + i] * xs[s * dim + c]; }
    want[t * dim + c] = acc / (1 + std::exp(-acc));
  }
  std::vector<float> state(2 * hist * dim, 9.f), got;
  // pieces: [0,6) start 0 (stale state), [6,7), [7,8), [8,12); slot 1
  int cuts[] = {0, 6, 7, 8, 12};
  for (int p = 0; p < 4; ++p) {
    int a = cuts[p], b = cuts[p + 1], n = b - a;
    // pass: chunk 0 = a dummy padding row of 1 token, chunk 1 = ours
    std::vector<float> x(dim, 0.5f); x.insert(x.end(), xs.begin() + a * dim, xs.begin() + b * dim);
    std::vector<int> chunks = {0, 1, 0, -1, 1, n, a, 1};
    std::vector<int> seq(1 + n, 1); seq[0] = 0;
    std::vector<float> out((1 + n) * dim);
    conv_kernel(x.data(), w.data(), state.data(), chunks.data(), seq.data(), 1 + n, dim, taps, out.data());
    conv_state_kernel(x.data(), state.data(), chunks.data(), 2, dim, hist);
    got.insert(got.end(), out.begin() + dim, out.end());
  }
  float worst = 0; for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
  std::printf("conv: max |piecewise - direct| %.3e; slot 0 untouched: %g\n", worst, state[0]);
  return worst < 1e-6 ? 0 : 1;
}
