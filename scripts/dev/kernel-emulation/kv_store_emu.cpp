// qkv_prep's store of the new K/V rows into the paged pool (kernels/fused.cu) runs on the
// host (see run.sh) against the two kernels it replaces: qkv_prep writing k and v, then
// ifd_kv_append (kernels/attention.cu) storing them. Both must leave the same bytes in the
// pool (values, 8-bit codes and scales, K's offset subtracted first), the same q, and
// nothing outside the pass's slots; a padding row (slot -1) stores nothing. Pools in f32,
// bf16, Q8 and Fp8; heads of 64, 128 and 256 values; the 4-value path (aligned input) and
// the one-value path (input one float off).
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "attention.cu"
#include "fused.cu"

#include "expect.h"

namespace {
using emu::expect;
using emu::failures;

const char* name(int dtype) {
  switch (dtype) {
    case IFD_KV_F32: return "f32";
    case IFD_KV_BF16: return "bf16";
    case IFD_KV_Q8: return "q8";
    default: return "fp8";
  }
}

// One pool layer: values (and 8-bit scales) filled with a pattern no store writes.
struct Pool {
  std::vector<float4> k, v;  // 16-byte aligned bytes
  std::vector<float> ks, vs, offset;
  IfdPaged paged;
  Pool(int dtype, int n_kv, int bs, int hd, int blocks, bool with_offset) {
    const size_t rows = static_cast<size_t>(blocks) * n_kv * bs;
    const size_t elem = dtype == IFD_KV_F32 ? 4 : dtype == IFD_KV_BF16 ? 2 : 1;
    const size_t bytes = rows * hd * elem;
    k.assign(bytes / 16 + 1, float4{-7.f, -7.f, -7.f, -7.f});
    v = k;
    const bool eight = dtype == IFD_KV_Q8 || dtype == IFD_KV_FP8;
    ks.assign(eight ? rows : 0, -1.f);
    vs = ks;
    std::mt19937 rng(hd + dtype);
    std::normal_distribution<float> g(0.f, 0.5f);
    if (with_offset) {
      offset.resize(static_cast<size_t>(n_kv) * hd);
      for (auto& x : offset) x = g(rng);
    }
    paged = IfdPaged{k.data(), v.data(), dtype, n_kv, bs, hd, eight ? ks.data() : nullptr,
                     eight ? vs.data() : nullptr, with_offset ? offset.data() : nullptr};
  }
  bool same(const Pool& o) const {
    return std::memcmp(k.data(), o.k.data(), k.size() * 16) == 0 &&
           std::memcmp(v.data(), o.v.data(), v.size() * 16) == 0 && ks == o.ks && vs == o.vs;
  }
};

void run(int dtype, int hd, bool shift, bool offset) {
  const int hq = 4, hkv = 2, bs = 4, blocks = 6, rows = 5, half = hd / 4;
  const int width = (hq + 2 * hkv) * hd, positions = 40;
  std::mt19937 rng(hd * 3 + dtype + shift);
  std::normal_distribution<float> g(0.f, 1.5f);
  std::vector<float4> in4(static_cast<size_t>(rows) * width / 4 + 2);
  float* in = reinterpret_cast<float*>(in4.data()) + (shift ? 1 : 0);
  for (int i = 0; i < rows * width; ++i) in[i] = g(rng);
  in[2 * width + hq * hd + 3] = 60.f;  // an outlier in a K head
  std::vector<float> qn(hd), kn(hd), cos_tab(positions * half), sin_tab(positions * half);
  for (auto& x : qn) x = 1.f + 0.2f * g(rng);
  for (auto& x : kn) x = 1.f + 0.2f * g(rng);
  for (int p = 0; p < positions; ++p)
    for (int j = 0; j < half; ++j) {
      const double a = p * std::pow(10000.0, -2.0 * j / (2 * half));
      cos_tab[p * half + j] = static_cast<float>(std::cos(a));
      sin_tab[p * half + j] = static_cast<float>(std::sin(a));
    }
  const std::vector<int32_t> pos = {0, 7, 13, 21, 39};
  // Slots in blocks out of order; row 3 is a padding row.
  const std::vector<int32_t> slot = {5 * bs + 0, 1 * bs + 3, 3 * bs + 1, -1, 0 * bs + 2};
  const size_t nq = static_cast<size_t>(rows) * hq * hd, nk = static_cast<size_t>(rows) * hkv * hd;

  // The two kernels: k and v written, then appended.
  Pool a(dtype, hkv, bs, hd, blocks, offset), b(dtype, hkv, bs, hd, blocks, offset);
  std::vector<bf16> qa(nq), qb(nq);
  std::vector<float4> k4(nk / 4 + 1), v4(nk / 4 + 1);
  float* k = reinterpret_cast<float*>(k4.data());
  float* v = reinterpret_cast<float*>(v4.data());
  expect(ifd_qkv_prep(in, 0, rows, hq, hkv, hd, qn.data(), kn.data(), 1e-6f, half, 1, pos.data(),
                      cos_tab.data(), sin_tab.data(), qa.data(), 1, k, v, nullptr, nullptr,
                      nullptr) == 0,
         "qkv_prep");
  expect(ifd_kv_append(a.paged, k, v, slot.data(), rows, nullptr) == 0, "kv_append");
  // The fused store, k and v not written.
  expect(ifd_qkv_prep(in, 0, rows, hq, hkv, hd, qn.data(), kn.data(), 1e-6f, half, 1, pos.data(),
                      cos_tab.data(), sin_tab.data(), qb.data(), 1, nullptr, nullptr, &b.paged,
                      slot.data(), nullptr) == 0,
         "qkv_prep with the store");
  char what[128];
  std::snprintf(what, sizeof what, "qkv_prep's store, %s pool, head_dim %d, %s path%s", name(dtype),
                hd, shift ? "one-value" : "4-value", offset ? ", K offset" : "");
  int qdiff = 0;
  for (size_t i = 0; i < nq; ++i) qdiff += qa[i].bits != qb[i].bits;
  expect(qdiff == 0, "q the same with the store", qdiff, 0);
  const bool same = a.same(b);
  expect(same, what);
  // The pool was written at all (not two untouched pools).
  Pool untouched(dtype, hkv, bs, hd, blocks, offset);
  expect(!a.same(untouched), "the append wrote the pool");
  std::printf("%s: %s\n", what, same ? "the same bytes" : "DIFFERENT");
}
}  // namespace

int main() {
  for (int dtype : {IFD_KV_F32, IFD_KV_BF16, IFD_KV_Q8, IFD_KV_FP8})
    for (int hd : {64, 128, 256})
      for (bool shift : {false, true}) {
        const bool eight = dtype == IFD_KV_Q8 || dtype == IFD_KV_FP8;
        run(dtype, hd, shift, false);
        if (eight) run(dtype, hd, shift, true);
      }
  // A pool the store cannot take is refused, not written past.
  Pool p(IFD_KV_BF16, 2, 4, 64, 2, false);
  p.paged.n_kv_heads = 3;
  std::vector<float> in(8 * 64);
  std::vector<bf16> q(4 * 64);
  const std::vector<int32_t> pos = {0}, slot = {0};
  std::vector<float> tab(64, 1.f);
  expect(ifd_qkv_prep(in.data(), 0, 1, 4, 2, 64, nullptr, nullptr, 1e-6f, 16, 1, pos.data(),
                      tab.data(), tab.data(), q.data(), 1, nullptr, nullptr, &p.paged, slot.data(),
                      nullptr) != 0,
         "a pool of other heads refused");
  std::printf(failures ? "kv_store: %d failure(s)\n" : "kv_store: ok\n", failures);
  return failures ? 1 : 0;
}
