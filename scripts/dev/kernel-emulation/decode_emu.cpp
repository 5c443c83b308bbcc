// kernels/decode.cu over bf16 pages on the host (see run.sh): its SIMT builds (1 row; the
// lean one from 2 rows), its tensor-core build (mma.sync and ldmatrix stood in for by
// common.cuh here, warp-wide) and that build grouped (a chunk's rows in one block: 2, 4 or
// 16 of them at 8, 4 or 1 query heads a KV head), against attention in double over the same bf16 rows, at
// head_dim 64 and 128 with 1, 4 and 8 query heads a KV head; blocks out of order, rows
// ending inside a block, one, three and forty splits (most of them empty). Rows 0..3 are
// one chunk (a speculative check: four tokens from position 142, over a 16-position tile's
// end, each row attending up to its own), row 4 another sequence's one token, row 5 a third chunk over the first one's
// table (a shared prefix, older positions only). The positions this pass writes (142..145 of
// the first sequence, 36 of the second) hold garbage until the kernel waits for the one
// before it (the KV append that writes them, emu::on_pdl_wait), so a read of one before the
// wait shows; one-row runs start at row 0 and, in 3 splits, at row 3 (three of its
// chunk's written positions before its own).
#include <cstdio>
#include <random>
#include <vector>

#include "decode.cu"
#include "expect.h"

namespace {
using emu::expect;
using emu::failures;

// The newest K/V rows the append before the kernel writes: their offsets in the planes,
// the values written, and the planes.
struct Newest {
  std::vector<size_t> rows;
  std::vector<__nv_bfloat16> k, v;
  __nv_bfloat16 *kc = nullptr, *vc = nullptr;
  int hd = 0;
  void put(bool written) {
    for (size_t i = 0; i < rows.size(); ++i)
      for (int e = 0; e < hd; ++e) {
        kc[rows[i] + e] = written ? k[i * hd + e] : __float2bfloat16(3e4f);
        vc[rows[i] + e] = written ? v[i * hd + e] : __float2bfloat16(-3e4f);
      }
  }
};
Newest newest;

void run(int hd, int group) {
  const int n_kv = 2, n_heads = n_kv * group, bs = 16, blocks = 13;
  std::mt19937 rng(hd * 10 + group);
  std::normal_distribution<float> g(0.f, 1.f);
  // Two tables: 146 positions through 10 blocks out of order, 37 through 3 (the block a
  // pass appends to is its sequence's own: no other table holds it).
  const std::vector<int32_t> table = {6, 2, 8, 0, 5, 1, 7, 11, 9, 3, 10, 4, 12};
  // Chunks: (first row, tokens, start position, state slot); chunk 2 reads chunk 0's table.
  const std::vector<int32_t> chunks = {0, 4, 142, 0, 4, 1, 36, 0, 5, 1, 63, 0};
  const std::vector<int32_t> bt_off = {0, 10, 0, 13};
  const std::vector<int32_t> seq = {0, 0, 0, 0, 1, 2}, pos = {142, 143, 144, 145, 36, 63};
  const size_t plane = static_cast<size_t>(blocks) * n_kv * bs * hd;
  std::vector<__nv_bfloat16> kc(plane), vc(plane);
  for (size_t i = 0; i < plane; ++i) {
    kc[i] = __float2bfloat16(g(rng) * 2.f);
    vc[i] = __float2bfloat16(g(rng));
  }
  const int nr = static_cast<int>(pos.size());
  std::vector<__nv_bfloat16> qb(static_cast<size_t>(nr) * n_heads * hd);
  for (auto& x : qb) x = __float2bfloat16(g(rng));
  const float sm = 1.f / std::sqrt(static_cast<float>(hd));
  std::vector<double> ref(qb.size());
  for (int r = 0; r < nr; ++r)
    for (int h = 0; h < n_heads; ++h) {
      const int kh = h / group;
      const int32_t* tab = table.data() + bt_off[seq[r]];
      const auto row = [&](int t) {
        return ((static_cast<size_t>(tab[t / bs]) * n_kv + kh) * bs + t % bs) * hd;
      };
      std::vector<double> s(pos[r] + 1);
      double m = -1e300, l = 0;
      for (int t = 0; t <= pos[r]; ++t) {
        double d = 0;
        for (int e = 0; e < hd; ++e)
          d += double(__bfloat162float(qb[(r * n_heads + h) * hd + e])) * __bfloat162float(kc[row(t) + e]);
        s[t] = d * sm;
        m = std::max(m, s[t]);
      }
      for (auto& x : s) l += (x = std::exp(x - m));
      for (int e = 0; e < hd; ++e) {
        double o = 0;
        for (int t = 0; t <= pos[r]; ++t) o += s[t] / l * __bfloat162float(vc[row(t) + e]);
        ref[(r * n_heads + h) * hd + e] = o;
      }
    }
  // What the pass writes: each chunk's positions from its start (blocks 9 and 3 of
  // the first table, past row 5's positions; block 12 of the second).
  newest = Newest{};
  newest.kc = kc.data();
  newest.vc = vc.data();
  newest.hd = hd;
  for (int c = 0; c < 2; ++c)
    for (int p = chunks[4 * c + 2]; p < chunks[4 * c + 2] + chunks[4 * c + 1]; ++p)
      for (int kh = 0; kh < n_kv; ++kh) {
        const int32_t* tab = table.data() + bt_off[c];
        const size_t at = ((static_cast<size_t>(tab[p / bs]) * n_kv + kh) * bs + p % bs) * hd;
        newest.rows.push_back(at);
        newest.k.insert(newest.k.end(), kc.begin() + at, kc.begin() + at + hd);
        newest.v.insert(newest.v.end(), vc.begin() + at, vc.begin() + at + hd);
      }
  emu::on_block_start = [] { newest.put(false); };
  emu::on_pdl_wait = [] { newest.put(true); };
  IfdPaged kv{kc.data(), vc.data(), IFD_KV_BF16, n_kv, bs, hd, nullptr, nullptr, nullptr};
  const size_t row_elems = static_cast<size_t>(n_heads) * hd;
  // SIMT, tensor cores, tensor cores grouped, tensor cores in clusters (8 / 4 warps a block),
  // tensor cores in blocks of 8 warps (the wide form)
  for (int mma : {0, 1, 2, 3, 4, 5})
    // 40: the merge's lanes take two splits each; the cluster form 2..16 (16: most empty)
    for (int splits : {1, 2, 3, 16, 40})
      for (const auto [first, rows] : {std::pair{0, 1}, std::pair{3, 1}, std::pair{0, nr}}) {
        // The split counts each form runs: the cluster forms 2, 3 and 16; the wide form 3,
        // 16 and 40; the others 1, 3, 16 and 40 (the tensor-core builds' last block merges
        // from shared memory where the partials fit its tile memory, from L2 where they do
        // not: 40 splits of 4 or 8 heads in 4-warp blocks).
        const bool cl = mma == 3 || mma == 4, wide = mma == 5;
        const bool takes = cl     ? splits == 2 || splits == 3 || splits == 16
                           : wide ? splits == 3 || splits == 16 || splits == 40
                                  : splits != 2;
        if (!takes) continue;
        if (first == 3 && splits != 3) continue;  // (3 splits: a range starts at 128)
        std::vector<float> part(static_cast<size_t>(nr) * n_heads * splits * (hd + 2));
        std::vector<int32_t> done(nr * n_kv, 0);
        std::vector<__nv_bfloat16> out(qb.size());
        char what[128];
        std::snprintf(what, sizeof what,
                      "head_dim %d, group %d, %s, %d row(s) from row %d, %d split(s)", hd, group,
                      mma == 5   ? "8-warp blocks"
                      : mma == 4 ? "clusters of 4-warp blocks"
                      : mma == 3 ? "clusters of 8-warp blocks"
                      : mma == 2 ? "grouped"
                      : mma      ? "tensor cores"
                                 : "SIMT",
                      rows, first,
                      splits);
        expect(ifd_decode_attention(kv, qb.data() + first * row_elems, rows, n_heads, sm,
                                    seq.data() + first, pos.data() + first, chunks.data(),
                                    bt_off.data(), table.data(), splits, part.data(),
                                    done.data(), mma, out.data(), nullptr) == 0,
               what);
        double w = 0;
        for (size_t i = 0; i < static_cast<size_t>(rows) * row_elems; ++i) {
          const double want = ref[first * row_elems + i];
          w = std::max(w, std::fabs(__bfloat162float(out[i]) - want) / (1.0 + std::fabs(want)));
        }
        // The tensor-core build weights V by bf16 probabilities: a looser bound.
        const double limit = mma ? 2e-2 : 1e-2;
        std::printf("  %s: worst |Δ| / (1 + |ref|) %.2e\n", what, w);
        expect(w < limit, what, w, limit);
        for (int x : done) expect(x == 0, "split counters reset");
      }
}
}  // namespace

int main() {
  for (int hd : {64, 128})
    for (int group : {1, 4, 8}) run(hd, group);
  std::printf(failures ? "decode: %d failure(s)\n" : "decode: ok\n", failures);
  return failures ? 1 : 0;
}
