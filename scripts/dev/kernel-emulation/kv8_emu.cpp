// The 8-bit KV kernels (kernels/attention.cu's append, page dequantization and simple
// attention; kernels/decode.cu; kernels/kv_gather.cu's copy into contiguous K/V, 8-bit and
// bf16) run on the host (see run.sh) over a sequence of random
// K/V rows, for Q8 and Fp8 at head_dim 64 and 128: the stored codes and scales against an
// independent quantizer here (bit for bit), the bf16 pages against the codes (bit for
// bit), and both attention kernels against attention over the dequantized rows in double.
#include <cstdio>
#include <random>
#include <vector>

#include "attention.cu"
#include "decode.cu"
#include "kv_gather.cu"

#include "expect.h"

namespace {
using emu::expect;
using emu::failures;

// The host's row format (crate::kv::q8 / fp8), written out here once more.
uint8_t code_of(int dtype, float v) {
  if (dtype == IFD_KV_FP8) return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
  if (std::isnan(v)) return 0;
  return static_cast<uint8_t>(static_cast<int8_t>(std::clamp(std::round(v), -127.f, 127.f)));
}
float value_of(int dtype, uint8_t c) {
  return dtype == IFD_KV_FP8 ? emu_e4m3_value(c) : static_cast<float>(static_cast<int8_t>(c));
}

void run(int dtype, int hd) {
  const int n_kv = 2, group = 4, n_heads = n_kv * group, bs = 16, len = 100, blocks = 9;
  const int row = n_kv * hd;
  std::mt19937 rng(dtype * 1000 + hd);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> k(len * row), v(len * row), c(n_kv * hd);
  for (auto& x : k) x = g(rng) * 2.f;
  for (auto& x : v) x = g(rng);
  for (auto& x : c) x = g(rng) * 0.5f;
  k[5 * row + 3] = 90.f;                                // an outlier
  std::fill(v.begin() + 7 * row, v.begin() + 8 * row, 0.f);  // a row of zeros
  // Blocks out of order: position t is in table[t / bs].
  const std::vector<int32_t> table = {6, 2, 8, 0, 5, 1, 7};
  std::vector<int32_t> slot(len + 1);
  for (int t = 0; t < len; ++t) slot[t] = table[t / bs] * bs + t % bs;
  slot[len] = -1;  // a padding row: stores nothing
  std::vector<float> kpad = k, vpad = v;
  kpad.resize((len + 1) * row, 1e6f);
  vpad.resize((len + 1) * row, 1e6f);

  const size_t rows = static_cast<size_t>(blocks) * n_kv * bs;
  std::vector<uint8_t> kc(rows * hd), vc(rows * hd);
  std::vector<float> ks(rows, -1.f), vs(rows, -1.f);
  IfdPaged kv{kc.data(), vc.data(), dtype, n_kv, bs, hd, ks.data(), vs.data(), c.data()};
  expect(ifd_kv_append(kv, kpad.data(), vpad.data(), slot.data(), len + 1, nullptr) == 0, "append");

  // Codes and scales, bit for bit.
  const float mx = dtype == IFD_KV_FP8 ? 448.f : 127.f;
  int bad = 0;
  for (int t = 0; t < len; ++t)
    for (int h = 0; h < n_kv; ++h)
      for (int is_v = 0; is_v < 2; ++is_v) {
        std::vector<float> d(hd);
        float amax = 0.f;
        for (int e = 0; e < hd; ++e) {
          const float x = (is_v ? v : k)[t * row + h * hd + e];
          d[e] = is_v ? x : x - c[h * hd + e];
          amax = std::max(amax, std::fabs(d[e]));
        }
        const float scale = amax / mx;
        const size_t r = (static_cast<size_t>(table[t / bs]) * n_kv + h) * bs + t % bs;
        if ((is_v ? vs : ks)[r] != scale) ++bad;
        for (int e = 0; e < hd; ++e) {
          const uint8_t want = scale == 0.f ? 0 : code_of(dtype, d[e] / scale);
          if ((is_v ? vc : kc)[r * hd + e] != want) ++bad;
        }
      }
  expect(bad == 0, "codes and scales as the host writes them", bad, 0);
  // Nothing stored outside the table's blocks (block 3 and 4 are not in it).
  for (int b : {3, 4})
    for (int i = 0; i < n_kv * bs; ++i) expect(ks[b * n_kv * bs + i] == -1.f, "untouched block");

  // Pages dequantized to bf16, bit for bit.
  std::vector<__nv_bfloat16> pk(table.size() * n_kv * bs * hd), pv(pk.size());
  expect(ifd_kv_dequant_pages(kv, table.data(), static_cast<int>(table.size()), pk.data(),
                              pv.data(), nullptr) == 0,
         "dequant pages");
  bad = 0;
  for (size_t p = 0; p < table.size(); ++p)
    for (int r = 0; r < n_kv * bs; ++r)
      for (int e = 0; e < hd; ++e) {
        const size_t from = static_cast<size_t>(table[p]) * n_kv * bs + r;
        const size_t to = (p * n_kv * bs + r) * hd + e;
        bad += pk[to].bits != __float2bfloat16(value_of(dtype, kc[from * hd + e]) * ks[from]).bits;
        bad += pv[to].bits != __float2bfloat16(value_of(dtype, vc[from * hd + e]) * vs[from]).bits;
      }
  expect(bad == 0, "bf16 pages", bad, 0);

  // Contiguous K/V (kv_gather.cu) of two sequences over the same blocks: the first 37
  // positions (a part-filled last page), then all 100, each from a multiple of 128 rows
  // (IFD_FI_RAGGED_ROW_ALIGN); every row dequantized bit for bit as the pages are, the
  // rows past each sequence's end zero. Then the same from a bf16 pool (the pages just
  // made, in table order): the same bits again.
  {
    const std::vector<int32_t> page_indptr = {0, 3, 10}, last_len = {37 - 32, 100 - 96};
    const std::vector<int32_t> tok_indptr = {0, 128, 256}, seq_len = {37, 100};
    std::vector<int32_t> pages(table.begin(), table.begin() + 3);
    pages.insert(pages.end(), table.begin(), table.end());
    const size_t n_tok = 256;
    const __nv_bfloat16 poison = __float2bfloat16(-7.f);
    std::vector<__nv_bfloat16> ck(n_tok * row, poison), cv(n_tok * row, poison);
    expect(ifd_kv_gather(kv, page_indptr.data(), pages.data(), last_len.data(),
                         tok_indptr.data(), 2, 10, ck.data(), cv.data(), nullptr) == 0,
           "kv gather (8-bit)");
    bad = 0;
    int gap = 0;
    for (size_t i = 0; i < n_tok; ++i) {
      const int sq = i < 128 ? 0 : 1;
      const int t = static_cast<int>(i) - tok_indptr[sq];
      for (int h = 0; h < n_kv; ++h)
        for (int e = 0; e < hd; ++e) {
          const size_t to = (i * n_kv + h) * hd + e;
          if (t >= seq_len[sq]) {
            gap += ck[to].bits != 0 || cv[to].bits != 0;
            continue;
          }
          const size_t from = (static_cast<size_t>(table[t / bs]) * n_kv + h) * bs + t % bs;
          bad += ck[to].bits != __float2bfloat16(value_of(dtype, kc[from * hd + e]) * ks[from]).bits;
          bad += cv[to].bits != __float2bfloat16(value_of(dtype, vc[from * hd + e]) * vs[from]).bits;
        }
    }
    expect(bad == 0, "contiguous K/V from 8-bit pages", bad, 0);
    expect(gap == 0, "contiguous K/V: zero rows past each sequence", gap, 0);
    // The bf16 pool: block p holds page p of pk / pv, i.e. table[p] of the 8-bit pool.
    IfdPaged kb{pk.data(), pv.data(), IFD_KV_BF16, n_kv, bs, hd, nullptr, nullptr, nullptr};
    std::vector<int32_t> ids = {0, 1, 2, 0, 1, 2, 3, 4, 5, 6};
    std::vector<__nv_bfloat16> bk(n_tok * row, poison), bv(n_tok * row, poison);
    expect(ifd_kv_gather(kb, page_indptr.data(), ids.data(), last_len.data(), tok_indptr.data(),
                         2, 10, bk.data(), bv.data(), nullptr) == 0,
           "kv gather (bf16)");
    bad = 0;
    for (size_t i = 0; i < ck.size(); ++i) bad += ck[i].bits != bk[i].bits || cv[i].bits != bv[i].bits;
    expect(bad == 0, "contiguous K/V from bf16 pages", bad, 0);
  }

  // Attention of rows at positions 99, 40 and 0 of the sequence, in double over the
  // dequantized rows (K minus its offset, as stored: the scores shift alike).
  const std::vector<int32_t> pos = {len - 1, 40, 0}, seq = {0, 0, 0};
  const std::vector<int32_t> bt_off = {0, static_cast<int32_t>(table.size())};
  const int nr = static_cast<int>(pos.size());
  std::vector<float> qf(nr * n_heads * hd);
  std::vector<__nv_bfloat16> qb(qf.size());
  for (size_t i = 0; i < qf.size(); ++i) {
    qb[i] = __float2bfloat16(g(rng));
    qf[i] = __bfloat162float(qb[i]);
  }
  const float sm = 1.f / std::sqrt(static_cast<float>(hd));
  std::vector<double> ref(qf.size());
  for (int r = 0; r < nr; ++r)
    for (int h = 0; h < n_heads; ++h) {
      const int kh = h / group;
      std::vector<double> s(pos[r] + 1);
      double m = -1e300, l = 0;
      for (int t = 0; t <= pos[r]; ++t) {
        const size_t rr = (static_cast<size_t>(table[t / bs]) * n_kv + kh) * bs + t % bs;
        double d = 0;
        for (int e = 0; e < hd; ++e)
          d += double(qf[(r * n_heads + h) * hd + e]) * value_of(dtype, kc[rr * hd + e]) * ks[rr];
        s[t] = d * sm;
        m = std::max(m, s[t]);
      }
      for (auto& x : s) l += (x = std::exp(x - m));
      for (int e = 0; e < hd; ++e) {
        double o = 0;
        for (int t = 0; t <= pos[r]; ++t) {
          const size_t rr = (static_cast<size_t>(table[t / bs]) * n_kv + kh) * bs + t % bs;
          o += s[t] / l * value_of(dtype, vc[rr * hd + e]) * vs[rr];
        }
        ref[(r * n_heads + h) * hd + e] = o;
      }
    }
  auto worst = [&](const std::vector<__nv_bfloat16>& out, size_t n) {
    double w = 0;
    for (size_t i = 0; i < n; ++i)
      w = std::max(w, std::fabs(__bfloat162float(out[i]) - ref[i]) / (1.0 + std::fabs(ref[i])));
    return w;
  };
  char what[128];
  // One row (the kernel as built for it) and all rows (its lean build, from 2 rows).
  for (int splits : {1, 3})
  for (int rows : {1, nr}) {
    std::vector<float> part(nr * n_heads * splits * (hd + 2));
    std::vector<int32_t> done(nr * n_kv, 0);
    std::vector<__nv_bfloat16> out(qf.size());
    expect(ifd_decode_attention(kv, qb.data(), rows, n_heads, sm, seq.data(), pos.data(),
                                nullptr, bt_off.data(), table.data(), splits, part.data(), done.data(),
                                0, out.data(), nullptr) == 0,
           "decode attention");
    const double w = worst(out, static_cast<size_t>(rows) * n_heads * hd);
    std::snprintf(what, sizeof what, "decode kernel, %d row(s), %d split(s)", rows, splits);
    std::printf("  %s: worst |Δ| / (1 + |ref|) %.2e\n", what, w);
    expect(w < 1e-2, what, w, 1e-2);
    for (int x : done) expect(x == 0, "split counters reset");
  }
  std::vector<__nv_bfloat16> out(qf.size());
  expect(ifd_attention(kv, qf.data(), nr, n_heads, sm, seq.data(), pos.data(), bt_off.data(),
                       table.data(), out.data(), nullptr) == 0,
         "simple attention");
  const double w = worst(out, out.size());
  std::printf("  simple kernel: worst |Δ| / (1 + |ref|) %.2e\n", w);
  expect(w < 1e-2, "simple kernel", w, 1e-2);
}
}  // namespace

int main() {
  for (int dtype : {IFD_KV_Q8, IFD_KV_FP8})
    for (int hd : {64, 128}) {
      std::printf("8-bit KV %s, head_dim %d\n", dtype == IFD_KV_Q8 ? "q8" : "fp8", hd);
      run(dtype, hd);
    }
  std::printf(failures ? "kv8: %d failure(s)\n" : "kv8: ok\n", failures);
  return failures ? 1 : 0;
}
