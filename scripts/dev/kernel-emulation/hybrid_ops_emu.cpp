// Every Gated DeltaNet kernel of kernels/delta_net.cu and delta_rule.cu, called through its
// C entry point (so the launch geometry is the real one) and run on the host by common.cuh,
// against the CPU backend's ops (src/backend/cpu/{conv,delta_net,delta_rule}.rs, transcribed:
// the token-by-token rule for the delta rule) at the fixtures' shapes and a 9B head shape.
// One pass: a 70-token prompt from position 0 (stale state in its slot), a decode row from a
// state, a 50-token piece from position 27 (across a 64-token chunk boundary), a padding row.
// The chunked delta rule runs both ways: delta_rule.cu's SIMT kernel (f32: within 1e-4) and
// delta_pieces.cu's tensor-core kernels (3xTF32 products: within 1e-4 too).
// Usage: built and run by run.sh; argv: nk nv dk dv taps head_dim (attention, for the q|gate
// split). Exit status 1 when any op is off by more than 1e-4 (bf16 outputs: by more than
// one bf16 step).
#include <cstdio>
#include <cstdlib>

#include "delta_net.cu"
#include "delta_rule.cu"
namespace pieces {
#include "delta_pieces.cu"
}

namespace {
uint64_t seed = 88172645463325252ull;
float rnd() {
  seed ^= seed << 13;
  seed ^= seed >> 7;
  seed ^= seed << 17;
  return (seed >> 40) / float(1 << 24) * 2 - 1;
}
std::vector<float> rnds(size_t n, float scale = 1.f, float offset = 0.f) {
  std::vector<float> v(n);
  for (auto& x : v) x = offset + scale * rnd();
  return v;
}
float worst(const std::vector<float>& a, const std::vector<float>& b) {
  float w = 0;
  for (size_t i = 0; i < a.size(); ++i) w = std::max(w, std::fabs(a[i] - b[i]));
  return w;
}
float silu(float x) { return x / (1.f + std::exp(-x)); }
float sigm(float x) { return 1.f / (1.f + std::exp(-x)); }
int failures = 0;
void report(const char* what, float w, float tol) {
  std::printf("  %-34s max |emulated - cpu| %.3e%s\n", what, w, w <= tol ? "" : "  FAIL");
  if (!(w <= tol)) ++failures;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: %s nk nv dk dv taps head_dim\n", argv[0]);
    return 2;
  }
  const int nk = atoi(argv[1]), nv = atoi(argv[2]), dk = atoi(argv[3]), dv = atoi(argv[4]);
  const int taps = atoi(argv[5]), hd = atoi(argv[6]), hist = taps - 1;
  const int key_dim = nk * dk, value_dim = nv * dv, conv_dim = 2 * key_dim + value_dim;
  std::printf("heads %d k x %d v of %d x %d, %d taps, attention heads of %d:\n", nk, nv, dk, dv,
              taps, hd);
  // chunks (first row, tokens, start position, state slot)
  const std::vector<int> chunks = {0, 70, 0, 2, 70, 1, 37, 0, 71, 50, 27, 3, 121, 1, 0, -1};
  const int nc = 4, n = 122, slots = 4;
  std::vector<int> seq(n);
  for (int c = 0; c < nc; ++c)
    for (int i = 0; i < chunks[4 * c + 1]; ++i) seq[chunks[4 * c] + i] = c;

  // --- causal conv1d + SiLU through the conv state ---
  {
    auto x = rnds(size_t(n) * conv_dim), w = rnds(size_t(conv_dim) * taps, 0.5f);
    auto state = rnds(size_t(slots) * hist * conv_dim, 2.f);
    auto ref_state = state;
    std::vector<float> out(size_t(n) * conv_dim, 1e9f), ref(out.size(), 0.f);
    for (int c = 0; c < nc; ++c) {
      const int first = chunks[4 * c], len = chunks[4 * c + 1], start = chunks[4 * c + 2],
                slot = chunks[4 * c + 3];
      // The CPU keeps no state for a padding row; its output rows are the convolution of zeros
      // history (what the kernel computes for slot < 0).
      std::vector<float> ext(size_t(hist + len) * conv_dim, 0.f);
      float* st = slot >= 0 ? &ref_state[size_t(slot) * hist * conv_dim] : nullptr;
      if (st && start != 0) std::copy(st, st + hist * conv_dim, ext.begin());
      std::copy(x.begin() + size_t(first) * conv_dim, x.begin() + size_t(first + len) * conv_dim,
                ext.begin() + size_t(hist) * conv_dim);
      for (int t = 0; t < len; ++t)
        for (int ch = 0; ch < conv_dim; ++ch) {
          float acc = 0;
          for (int i = 0; i < taps; ++i)
            acc += w[size_t(ch) * taps + i] * ext[size_t(t + i) * conv_dim + ch];
          ref[size_t(first + t) * conv_dim + ch] = silu(acc);
        }
      if (st) std::copy(ext.end() - hist * conv_dim, ext.end(), st);
    }
    ifd_causal_conv1d_silu(x.data(), w.data(), state.data(), chunks.data(), nc, seq.data(), n,
                           conv_dim, taps, out.data(), nullptr);
    report("causal_conv1d_silu: out", worst(out, ref), 1e-5f);
    report("causal_conv1d_silu: conv state", worst(state, ref_state), 0.f);
  }
  // --- L2 norm per head (q scaled by 1/sqrt(dk)) ---
  {
    auto x = rnds(size_t(n) * key_dim);
    auto ref = x;
    const float scale = 1.f / std::sqrt(float(dk)), eps = 1e-6f;
    for (size_t h = 0; h < ref.size() / dk; ++h) {
      float ss = 0;
      for (int a = 0; a < dk; ++a) ss += ref[h * dk + a] * ref[h * dk + a];
      const float inv = 1.f / std::sqrt(ss + eps);
      for (int a = 0; a < dk; ++a) ref[h * dk + a] = ref[h * dk + a] * inv * scale;
    }
    ifd_l2_norm_heads(x.data(), n * key_dim / dk, dk, eps, scale, nullptr);
    report("l2_norm_heads", worst(x, ref), 1e-6f);
  }
  // --- decay and beta gates ---
  {
    auto a = rnds(size_t(n) * nv, 12.f), b = rnds(size_t(n) * nv, 6.f);
    auto a_log = rnds(nv, 1.f), dt = rnds(nv, 10.f);
    std::vector<float> g(a.size()), beta(a.size()), rg(a.size()), rb(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      const int h = int(i % nv);
      const float sp = a[i] + dt[h] > 20.f ? a[i] + dt[h] : std::log1p(std::exp(a[i] + dt[h]));
      rg[i] = -std::exp(a_log[h]) * sp;
      rb[i] = sigm(b[i]);
    }
    ifd_delta_gates(a.data(), b.data(), a_log.data(), dt.data(), n, nv, g.data(), beta.data(),
                    nullptr);
    report("delta_gates: g", worst(g, rg), 1e-5f);
    report("delta_gates: beta", worst(beta, rb), 1e-6f);
  }
  // --- gated RMSNorm (bf16 out), eps 1e-6 and 1e-5 ---
  for (float eps : {1e-6f, 1e-5f}) {
    auto x = rnds(size_t(n) * value_dim, 0.01f), z = rnds(size_t(n) * value_dim, 3.f);
    auto w = rnds(dv, 0.5f, 1.f);
    std::vector<__nv_bfloat16> out(x.size());
    std::vector<float> got(x.size()), ref(x.size());
    for (size_t h = 0; h < x.size() / dv; ++h) {
      float ss = 0;
      for (int e = 0; e < dv; ++e) ss += x[h * dv + e] * x[h * dv + e];
      const float r = 1.f / std::sqrt(ss / dv + eps);
      for (int e = 0; e < dv; ++e) {
        const size_t i = h * dv + e;
        ref[i] = w[e] * (x[i] * r) * silu(z[i]);
      }
    }
    ifd_gated_rms_norm(x.data(), z.data(), w.data(), n * value_dim / dv, dv, eps, out.data(),
                       nullptr);
    float rel = 0;
    for (size_t i = 0; i < x.size(); ++i)
      rel = std::max(rel, std::fabs(__bfloat162float(out[i]) - ref[i]) / std::max(std::fabs(ref[i]), 1e-6f));
    report(eps == 1e-6f ? "gated_rms_norm (eps 1e-6): rel" : "gated_rms_norm (eps 1e-5): rel",
           rel, 1.f / 256);
  }
  // --- q|gate split per attention head, sigmoid gate on bf16 and f32 ---
  {
    const int heads = 4;
    auto x = rnds(size_t(n) * heads * 2 * hd);
    std::vector<float> a(size_t(n) * heads * hd), b(a.size()), ra(a.size()), rb(a.size());
    for (size_t s = 0; s < size_t(n) * heads; ++s)
      for (int e = 0; e < hd; ++e) {
        ra[s * hd + e] = x[s * 2 * hd + e];
        rb[s * hd + e] = x[s * 2 * hd + hd + e];
      }
    ifd_split_head_pairs(x.data(), n, heads, hd, a.data(), b.data(), nullptr);
    report("split_head_pairs", std::max(worst(a, ra), worst(b, rb)), 0.f);
    auto gate = rnds(a.size(), 8.f);
    std::vector<float> f = a, rf(a.size());
    for (size_t i = 0; i < a.size(); ++i) rf[i] = a[i] * sigm(gate[i]);
    ifd_sigmoid_mul(f.data(), 0, gate.data(), f.size(), nullptr);
    report("sigmoid_mul (f32)", worst(f, rf), 1e-6f);
    std::vector<__nv_bfloat16> h(a.size());
    for (size_t i = 0; i < a.size(); ++i) h[i] = __float2bfloat16(a[i]);
    ifd_sigmoid_mul(h.data(), 1, gate.data(), h.size(), nullptr);
    float rel = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      const float want = __bfloat162float(__float2bfloat16(a[i])) * sigm(gate[i]);
      rel = std::max(rel, std::fabs(__bfloat162float(h[i]) - want) / std::max(std::fabs(want), 1e-6f));
    }
    report("sigmoid_mul (bf16): rel", rel, 1.f / 256);
  }
  // --- the gated delta rule: recurrent (decode) and chunked (prompt pieces) ---
  {
    auto unit = [&](std::vector<float>& m, float scale) {
      for (size_t r = 0; r < m.size() / dk; ++r) {
        float s = 0;
        for (int a = 0; a < dk; ++a) s += m[r * dk + a] * m[r * dk + a];
        for (int a = 0; a < dk; ++a) m[r * dk + a] *= scale / std::sqrt(s);
      }
    };
    auto q = rnds(size_t(n) * key_dim), k = rnds(size_t(n) * key_dim);
    unit(q, 1 / std::sqrt(float(dk)));
    unit(k, 1);
    auto v = rnds(size_t(n) * value_dim), g = rnds(size_t(n) * nv, 0.3f, -0.3f);
    auto beta = rnds(size_t(n) * nv, 0.5f, 0.5f);
    auto state = rnds(size_t(slots) * nv * dk * dv, 0.3f);
    auto ref_state = state;
    std::vector<float> out(size_t(n) * value_dim, 1e9f), ref(out.size(), 0.f);
    for (int c = 0; c < nc; ++c) {
      const int first = chunks[4 * c], len = chunks[4 * c + 1], start = chunks[4 * c + 2],
                slot = chunks[4 * c + 3];
      if (slot < 0) continue;  // a padding row: zero output, no state
      for (int h = 0; h < nv; ++h) {
        float* S = &ref_state[(size_t(slot) * nv + h) * dk * dv];
        if (start == 0) std::fill(S, S + dk * dv, 0.f);
        const int hk = h / (nv / nk);
        for (int t = first; t < first + len; ++t) {
          const float* kk = &k[(size_t(t) * nk + hk) * dk];
          const float* qq = &q[(size_t(t) * nk + hk) * dk];
          const float d = std::exp(g[size_t(t) * nv + h]);
          for (int e = 0; e < dk * dv; ++e) S[e] *= d;
          for (int j = 0; j < dv; ++j) {
            float mem = 0;
            for (int a = 0; a < dk; ++a) mem += kk[a] * S[a * dv + j];
            const float delta = (v[(size_t(t) * nv + h) * dv + j] - mem) * beta[size_t(t) * nv + h];
            for (int a = 0; a < dk; ++a) S[a * dv + j] += kk[a] * delta;
            float o = 0;
            for (int a = 0; a < dk; ++a) o += qq[a] * S[a * dv + j];
            ref[(size_t(t) * nv + h) * dv + j] = o;
          }
        }
      }
    }
    for (int e = 0; e < value_dim; ++e) ref[size_t(121) * value_dim + e] = 0.f;
    const auto initial = state;
    ifd_delta_rule_recurrent(q.data(), k.data(), v.data(), g.data(), beta.data(), state.data(),
                             chunks.data(), nc, nk, nv, dk, dv, out.data(), nullptr);
    ifd_delta_rule_chunked(q.data(), k.data(), v.data(), g.data(), beta.data(), state.data(),
                           chunks.data(), nc, nk, nv, dk, dv, out.data(), nullptr);
    report("gated_delta_rule: out", worst(out, ref), 1e-4f);
    report("gated_delta_rule: state", worst(state, ref_state), 1e-4f);
    // The tensor-core form, where it takes the shape: the piece table as CudaBatch packs it.
    if (dk <= 128) {
      std::vector<int> table, base(nc, 0);
      for (int c = 0; c < nc; ++c) {
        const int len = chunks[4 * c + 1], start = chunks[4 * c + 2];
        base[c] = int(table.size() / 2);
        if (len < 2 || chunks[4 * c + 3] < 0) continue;
        for (int p = 0; p < (start % 64 + len + 63) / 64; ++p) table.insert(table.end(), {c, p});
      }
      const int np = int(table.size() / 2);
      std::vector<float> ws(pieces::ifd_delta_pieces_ws_floats(np, nv, dk, dv), NAN);
      state = initial;
      std::fill(out.begin(), out.end(), 1e9f);
      ifd_delta_rule_recurrent(q.data(), k.data(), v.data(), g.data(), beta.data(), state.data(),
                               chunks.data(), nc, nk, nv, dk, dv, out.data(), nullptr);
      const int rc = pieces::ifd_delta_rule_pieces(
          q.data(), k.data(), v.data(), g.data(), beta.data(), state.data(), chunks.data(), nc,
          table.data(), base.data(), np, nk, nv, dk, dv, ws.data(), out.data(), nullptr);
      if (rc != 0) {
        std::printf("  delta_rule_pieces: error %d  FAIL\n", rc);
        ++failures;
      }
      report("gated_delta_rule (tensor cores): out", worst(out, ref), 1e-4f);
      report("gated_delta_rule (tensor cores): state", worst(state, ref_state), 1e-4f);
    }
  }
  return failures ? 1 : 0;
}
