// Host emulation of kernels/delta_rule.cu (the kernels' own source, made host C++ by run.sh):
// each block's threads as std::threads, __syncthreads as a barrier; blocks run one after the
// other. Checked against the token-by-token rule:
// a 150-token prompt, a decode row from a state, a 70-token piece from position 100 and a
// padding row, heads of EMU_DK x EMU_DV (default 40 x 70: three column tiles, the last partial).
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>
#include <algorithm>
using std::min;
struct Dim { int x = 0, y = 0, z = 0; };
thread_local Dim threadIdx;
Dim blockIdx, blockDim, gridDim;
std::barrier<>* g_bar;
float g_smem[1 << 16];
#define __syncthreads() g_bar->arrive_and_wait()
#define __restrict__
#define expf std::exp
#include "delta_rule.inc"

template <typename F>
void launch(int gx, int gy, int threads, F kernel) {
  for (int by = 0; by < gy; ++by)
    for (int bx = 0; bx < gx; ++bx) {
      blockIdx = {bx, by, 0};
      blockDim = {threads, 1, 1};
      std::barrier<> bar(threads);
      g_bar = &bar;
      std::vector<std::thread> ts;
      for (int t = 0; t < threads; ++t)
        ts.emplace_back([&, t] { threadIdx = {t, 0, 0}; kernel(); });
      for (auto& t : ts) t.join();
    }
}

uint64_t seed = 88172645463325252ull;
float rnd() { seed ^= seed << 13; seed ^= seed >> 7; seed ^= seed << 17; return (seed >> 40) / float(1 << 24) * 2 - 1; }

int main() {
  const int nk = 2, nv = 4, dk = EMU_DK, dv = EMU_DV, slots = 4;  // 3 column tiles, the last partial
  // chunks: (first, tokens, start, slot): a 150-token prompt from 0, a 1-token decode, a
  // 70-token piece from position 100 (inside a chunk), a padding row.
  std::vector<int> chunks = {0, 150, 0, 2, 150, 1, 37, 0, 151, 70, 100, 3, 221, 1, 0, -1};
  const int nc = 4, n = 222;
  std::vector<float> q(n * nk * dk), k(n * nk * dk), v(n * nv * dv), g(n * nv), beta(n * nv);
  auto unit = [&](std::vector<float>& m, float scale) {
    for (auto& x : m) x = rnd();
    for (int r = 0; r < n * nk; ++r) {
      float s = 0; for (int a = 0; a < dk; ++a) s += m[r * dk + a] * m[r * dk + a];
      for (int a = 0; a < dk; ++a) m[r * dk + a] *= scale / std::sqrt(s);
    }
  };
  unit(q, 1 / std::sqrt(float(dk))); unit(k, 1);
  for (auto& x : v) x = rnd();
  for (auto& x : g) x = -0.3f * (rnd() + 1);
  for (auto& x : beta) x = 0.5f + 0.5f * rnd();
  std::vector<float> state(slots * nv * dk * dv);
  for (auto& x : state) x = 0.3f * rnd();
  std::vector<float> ref_state = state, out(n * nv * dv, 1e9f), ref(n * nv * dv, 0.f);
  // Reference: token by token (the CPU's recurrent form).
  for (int c = 0; c < nc; ++c) {
    int first = chunks[4 * c], len = chunks[4 * c + 1], start = chunks[4 * c + 2], slot = chunks[4 * c + 3];
    if (slot < 0) continue;
    for (int h = 0; h < nv; ++h) {
      float* S = &ref_state[(slot * nv + h) * dk * dv];
      if (start == 0) std::fill(S, S + dk * dv, 0.f);
      int hk = h / (nv / nk);
      for (int t = first; t < first + len; ++t) {
        const float* kk = &k[(t * nk + hk) * dk]; const float* qq = &q[(t * nk + hk) * dk];
        float d = std::exp(g[t * nv + h]);
        for (int e = 0; e < dk * dv; ++e) S[e] *= d;
        for (int j = 0; j < dv; ++j) {
          float mem = 0; for (int a = 0; a < dk; ++a) mem += kk[a] * S[a * dv + j];
          float delta = (v[(t * nv + h) * dv + j] - mem) * beta[t * nv + h];
          for (int a = 0; a < dk; ++a) S[a * dv + j] += kk[a] * delta;
          float o = 0; for (int a = 0; a < dk; ++a) o += qq[a] * S[a * dv + j];
          ref[(t * nv + h) * dv + j] = o;
        }
      }
    }
  }
  Geometry geo{nk, nv, dk, dv};
  const int tiles = (dv + kCols - 1) / kCols;
  launch(nv * tiles, nc, kCols, [&] {
    recurrent_kernel<EMU_KMAX>(q.data(), k.data(), v.data(), g.data(), beta.data(), state.data(), chunks.data(), geo, out.data());
  });
  launch(nv * tiles, nc, kThreads, [&] {
    chunked_kernel(q.data(), k.data(), v.data(), g.data(), beta.data(), state.data(), chunks.data(), geo, out.data());
  });
  float wo = 0, ws = 0;
  for (int t = 0; t < n; ++t) for (int e = 0; e < nv * dv; ++e) {
    float want = t == 221 ? 0.f : ref[t * nv * dv + e];
    wo = std::max(wo, std::fabs(out[t * nv * dv + e] - want));
  }
  for (size_t e = 0; e < state.size(); ++e) ws = std::max(ws, std::fabs(state[e] - ref_state[e]));
  std::printf("max |out - ref| %.3e, max |state - ref| %.3e, smem floats %zu\n", wo, ws, chunked_smem_floats(dk));
  return wo < 1e-4 && ws < 1e-4 ? 0 : 1;
}
