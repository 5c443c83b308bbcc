//! The gated delta rule (Yang, Kautz & Hatamizadeh, "Gated Delta Networks", 2024) on
//! one value head: a state S `[dk, dv]` that, per token t, decays by `exp(g_t)` and is
//! corrected toward mapping k_t to v_t with step beta_t, then read by q_t:
//!
//! ```text
//! S_t = exp(g_t) S_{t-1} + k_t ⊗ beta_t (v_t - exp(g_t) S_{t-1}ᵀ k_t)      o_t = S_tᵀ q_t
//! ```
//!
//! [`recurrent`] runs that token by token (decode). [`chunked`] computes the same over
//! chunks of [`DELTA_CHUNK`] tokens at once (prefill), with the WY / UT form of DeltaNet
//! (Yang et al., "Parallelizing Linear Transformers with the Delta Rule", 2024): in a
//! chunk of L tokens with cumulative log decay `c_i = Σ_{j≤i} g_j`,
//!
//! ```text
//! A_ij = beta_i (k_i·k_j) exp(c_i - c_j)               j < i    (strictly lower)
//! (I + A) U = diag(beta) V                             U [L, dv] (forward substitution)
//! (I + A) W = diag(beta exp(c)) K                      W [L, dk]
//! V' = U - W S                                         the part S does not predict
//! O_i = exp(c_i) q_iᵀ S + Σ_{j≤i} (q_i·k_j) exp(c_i - c_j) V'_j
//! S  ← exp(c_L) S + Σ_j exp(c_L - c_j) k_j ⊗ V'_j
//! ```
//!
//! which is transformers' `torch_chunk_gated_delta_rule` step for step. Chunks lie at
//! fixed absolute positions (multiples of [`DELTA_CHUNK`]): a piece that starts inside
//! one first finishes it, so a chunk boundary never depends on how a prompt was split.

use super::simd;
use crate::backend::DELTA_CHUNK;

/// One head's inputs for `L` tokens: q, k `[L, dk]` (L2-normalized, q also scaled by
/// `1/sqrt(dk)`), v `[L, dv]`, g (log decay) and beta `[L]`.
#[derive(Clone, Copy)]
pub struct HeadInputs<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub g: &'a [f32],
    pub beta: &'a [f32],
    pub dk: usize,
    pub dv: usize,
}

impl HeadInputs<'_> {
    fn len(&self) -> usize {
        self.g.len()
    }

    /// The inputs of tokens `from..to`.
    fn slice(&self, from: usize, to: usize) -> HeadInputs<'_> {
        let (dk, dv) = (self.dk, self.dv);
        HeadInputs {
            q: &self.q[from * dk..to * dk],
            k: &self.k[from * dk..to * dk],
            v: &self.v[from * dv..to * dv],
            g: &self.g[from..to],
            beta: &self.beta[from..to],
            dk,
            dv,
        }
    }
}

use simd::axpy;

/// Token by token from state `s` `[dk, dv]` (updated) -> out `[L, dv]`.
pub fn recurrent(x: HeadInputs<'_>, s: &mut [f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if simd::has_avx2() {
        // SAFETY: the CPU has AVX2 and FMA (checked at run time).
        return unsafe { recurrent_avx2(x, s, out) };
    }
    recurrent_body(x, s, out)
}

/// [`recurrent_body`] compiled for AVX2 + FMA (a named function: a closure handed to
/// `simd::with_avx2` is not reliably inlined into it).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn recurrent_avx2(x: HeadInputs<'_>, s: &mut [f32], out: &mut [f32]) {
    recurrent_body(x, s, out)
}

#[inline(always)]
fn recurrent_body(x: HeadInputs<'_>, s: &mut [f32], out: &mut [f32]) {
    let (dk, dv) = (x.dk, x.dv);
    let mut kv_mem = vec![0.0f32; dv]; // [dv]
    for t in 0..x.len() {
        let (q, k, v) = (
            &x.q[t * dk..(t + 1) * dk],
            &x.k[t * dk..(t + 1) * dk],
            &x.v[t * dv..(t + 1) * dv],
        );
        let decay = x.g[t].exp();
        for e in s.iter_mut() {
            *e *= decay;
        }
        // what S predicts for k: Sᵀk
        kv_mem.fill(0.0);
        for (a, srow) in s.chunks_exact(dv).enumerate() {
            axpy(&mut kv_mem, k[a], srow);
        }
        // delta = beta (v - Sᵀk); S += k ⊗ delta
        for (m, &vb) in kv_mem.iter_mut().zip(v) {
            *m = (vb - *m) * x.beta[t];
        }
        for (a, srow) in s.chunks_exact_mut(dv).enumerate() {
            axpy(srow, k[a], &kv_mem);
        }
        // o = Sᵀq
        let o = &mut out[t * dv..(t + 1) * dv];
        o.fill(0.0);
        for (a, srow) in s.chunks_exact(dv).enumerate() {
            axpy(o, q[a], srow);
        }
    }
}

/// The chunked form over tokens at absolute positions `start_pos..`, from state `s`
/// `[dk, dv]` (updated) -> out `[L, dv]`.
pub fn chunked(x: HeadInputs<'_>, start_pos: usize, s: &mut [f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if simd::has_avx2() {
        // SAFETY: the CPU has AVX2 and FMA (checked at run time).
        return unsafe { chunked_avx2(x, start_pos, s, out) };
    }
    chunked_body(x, start_pos, s, out)
}

/// [`chunked_body`] compiled for AVX2 + FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn chunked_avx2(x: HeadInputs<'_>, start_pos: usize, s: &mut [f32], out: &mut [f32]) {
    chunked_body(x, start_pos, s, out)
}

#[inline(always)]
fn chunked_body(x: HeadInputs<'_>, start_pos: usize, s: &mut [f32], out: &mut [f32]) {
    let mut i = 0;
    while i < x.len() {
        let len = (x.len() - i).min(DELTA_CHUNK - (start_pos + i) % DELTA_CHUNK);
        one_chunk(x.slice(i, i + len), s, &mut out[i * x.dv..(i + len) * x.dv]);
        i += len;
    }
}

/// `out += a · b` for row-major a `[m, kd]`, b `[kd, n]`, out `[m, n]`: register tiles
/// of 4 rows × 16 columns, the sum over kd in order for every output.
#[inline(always)]
fn matmul_acc(out: &mut [f32], a: &[f32], b: &[f32], m: usize, kd: usize, n: usize) {
    const MR: usize = 4;
    const NR: usize = 16;
    let mut i0 = 0;
    while i0 < m {
        let mr = MR.min(m - i0);
        let mut j0 = 0;
        while j0 < n {
            let nr = NR.min(n - j0);
            let mut acc = [[0f32; NR]; MR];
            if mr == MR && nr == NR {
                let rows: [&[f32]; MR] =
                    std::array::from_fn(|r| &a[(i0 + r) * kd..(i0 + r + 1) * kd]);
                for (kk, brow) in b.chunks_exact(n).take(kd).enumerate() {
                    let bv: [f32; NR] = brow[j0..j0 + NR].try_into().unwrap();
                    for r in 0..MR {
                        let av = rows[r][kk];
                        for cc in 0..NR {
                            acc[r][cc] += av * bv[cc];
                        }
                    }
                }
            } else {
                for kk in 0..kd {
                    let bv = &b[kk * n + j0..kk * n + j0 + nr];
                    for (r, accr) in acc.iter_mut().enumerate().take(mr) {
                        let av = a[(i0 + r) * kd + kk];
                        for (c, &bc) in bv.iter().enumerate() {
                            accr[c] += av * bc;
                        }
                    }
                }
            }
            for (r, accr) in acc.iter().enumerate().take(mr) {
                let o = &mut out[(i0 + r) * n + j0..(i0 + r) * n + j0 + nr];
                for (ov, &av) in o.iter_mut().zip(accr) {
                    *ov += av;
                }
            }
            j0 += NR;
        }
        i0 += MR;
    }
}

/// One chunk (at most [`DELTA_CHUNK`] tokens) in the WY / UT form (module docs); the
/// three `[L, dk] × [dk, dv]`-sized products run as register-tiled matrix products.
#[inline(always)]
fn one_chunk(x: HeadInputs<'_>, s: &mut [f32], out: &mut [f32]) {
    let (l, dk, dv) = (x.len(), x.dk, x.dv);
    let krow = |i: usize| &x.k[i * dk..(i + 1) * dk];
    // c: cumulative log decay in the chunk.  [L]
    let mut c = vec![0.0f32; l];
    let mut acc = 0.0f32;
    for (ci, &g) in c.iter_mut().zip(x.g) {
        acc += g;
        *ci = acc;
    }
    // decay[i][j] = exp(c_i - c_j) for j ≤ i, 0 above.  [L, L]
    let mut decay = vec![0.0f32; l * l];
    for i in 0..l {
        for j in 0..=i {
            decay[i * l + j] = (c[i] - c[j]).exp();
        }
    }
    // Kᵀ [dk, L]; G = K Kᵀ and Q Kᵀ [L, L] as matrix products
    let mut kt = vec![0.0f32; dk * l];
    for j in 0..l {
        for (a_, &kv) in krow(j).iter().enumerate() {
            kt[a_ * l + j] = kv;
        }
    }
    let mut gram = vec![0.0f32; l * l];
    matmul_acc(&mut gram, x.k, &kt, l, dk, l);
    let mut qk = vec![0.0f32; l * l];
    matmul_acc(&mut qk, x.q, &kt, l, dk, l);
    // A: strictly lower, A_ij = beta_i (k_i·k_j) exp(c_i - c_j).  [L, L]
    let mut a = vec![0.0f32; l * l];
    for i in 0..l {
        for j in 0..i {
            a[i * l + j] = x.beta[i] * gram[i * l + j] * decay[i * l + j];
        }
    }
    // U = (I + A)⁻¹ diag(beta) V  [L, dv];  W = (I + A)⁻¹ diag(beta exp(c)) K  [L, dk]
    let mut u = vec![0.0f32; l * dv];
    let mut w = vec![0.0f32; l * dk];
    for i in 0..l {
        let (done_u, rest_u) = u.split_at_mut(i * dv);
        let ui = &mut rest_u[..dv];
        for (o, &vv) in ui.iter_mut().zip(&x.v[i * dv..(i + 1) * dv]) {
            *o = vv * x.beta[i];
        }
        let (done_w, rest_w) = w.split_at_mut(i * dk);
        let wi = &mut rest_w[..dk];
        let e = c[i].exp();
        for (o, &kv) in wi.iter_mut().zip(krow(i)) {
            *o = kv * x.beta[i] * e;
        }
        for j in 0..i {
            let aij = a[i * l + j];
            axpy(ui, -aij, &done_u[j * dv..(j + 1) * dv]);
            axpy(wi, -aij, &done_w[j * dk..(j + 1) * dk]);
        }
    }
    // V' = U - W S  [L, dv]
    let mut vn = u;
    w.iter_mut().for_each(|v| *v = -*v);
    matmul_acc(&mut vn, &w, s, l, dk, dv);
    // O = (exp(c) ⊙ Q) S + P V', P_ij = (q_i·k_j) exp(c_i - c_j) for j ≤ i  [L, dv]
    let mut qd = vec![0.0f32; l * dk]; // [L, dk]
    for i in 0..l {
        let e = c[i].exp();
        for (o, &qv) in qd[i * dk..(i + 1) * dk]
            .iter_mut()
            .zip(&x.q[i * dk..(i + 1) * dk])
        {
            *o = qv * e;
        }
    }
    let mut p = vec![0.0f32; l * l]; // [L, L]
    for i in 0..l {
        for j in 0..=i {
            p[i * l + j] = qk[i * l + j] * decay[i * l + j];
        }
    }
    out.fill(0.0);
    matmul_acc(out, &qd, s, l, dk, dv);
    matmul_acc(out, &p, &vn, l, l, dv);
    // S ← exp(c_L) S + Kdᵀ V', Kd_j = exp(c_L - c_j) k_j
    let last = c[l - 1];
    let total = last.exp();
    for e in s.iter_mut() {
        *e *= total;
    }
    let mut kdt = vec![0.0f32; dk * l]; // [dk, L]
    for j in 0..l {
        let dj = (last - c[j]).exp();
        for (a_, &kv) in krow(j).iter().enumerate() {
            kdt[a_ * l + j] = kv * dj;
        }
    }
    matmul_acc(s, &kdt, &vn, dk, l, dv);
}

/// Deterministic inputs of the delta rule, for its tests and its bench.
pub mod inputs {
    /// Pseudo-random values in (-1, 1) (xorshift from `seed`).
    pub fn noise(n: usize, seed: u64) -> Vec<f32> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// Every `d`-long row of `m` scaled to norm `scale`.
    pub fn unit_rows(mut m: Vec<f32>, d: usize, scale: f32) -> Vec<f32> {
        for r in m.chunks_mut(d) {
            let n = r.iter().map(|v| v * v).sum::<f32>().sqrt();
            r.iter_mut().for_each(|v| *v = *v / n * scale);
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::inputs::{noise, unit_rows};
    use super::*;

    struct Case {
        q: Vec<f32>,
        k: Vec<f32>,
        v: Vec<f32>,
        g: Vec<f32>,
        beta: Vec<f32>,
        dk: usize,
        dv: usize,
    }

    impl Case {
        fn new(l: usize, dk: usize, dv: usize) -> Case {
            let scale = 1.0 / (dk as f32).sqrt();
            Case {
                q: unit_rows(noise(l * dk, 1), dk, 1.0)
                    .iter()
                    .map(|v| v * scale)
                    .collect(),
                k: unit_rows(noise(l * dk, 2), dk, 1.0),
                v: noise(l * dv, 3),
                g: noise(l, 4).iter().map(|v| -0.3 * (v + 1.0)).collect(),
                beta: noise(l, 5).iter().map(|v| 0.5 + 0.5 * v).collect(),
                dk,
                dv,
            }
        }

        fn inputs(&self) -> HeadInputs<'_> {
            HeadInputs {
                q: &self.q,
                k: &self.k,
                v: &self.v,
                g: &self.g,
                beta: &self.beta,
                dk: self.dk,
                dv: self.dv,
            }
        }
    }

    fn max_diff(a: &[f32], b: &[f32]) -> f32 {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(
                0.0,
                |m: f32, d| if d.is_nan() { f32::INFINITY } else { m.max(d) },
            )
    }

    #[test]
    fn chunked_equals_recurrent_from_any_start_and_state() {
        let (l, dk, dv) = (150, 8, 12);
        let case = Case::new(l, dk, dv);
        let s0 = noise(dk * dv, 9);
        for start in [0, 5, 63, 64, 100] {
            let (mut s_rec, mut s_chk) = (s0.clone(), s0.clone());
            let (mut o_rec, mut o_chk) = (vec![0.0; l * dv], vec![0.0; l * dv]);
            recurrent(case.inputs(), &mut s_rec, &mut o_rec);
            chunked(case.inputs(), start, &mut s_chk, &mut o_chk);
            assert!(max_diff(&o_rec, &o_chk) < 2e-5, "start {start}: outputs");
            assert!(max_diff(&s_rec, &s_chk) < 2e-5, "start {start}: states");
        }
    }

    #[test]
    fn a_piece_continues_from_the_state_it_left() {
        let (l, dk, dv) = (130, 4, 6);
        let case = Case::new(l, dk, dv);
        let mut s_whole = vec![0.0; dk * dv];
        let mut o_whole = vec![0.0; l * dv];
        chunked(case.inputs(), 0, &mut s_whole, &mut o_whole);
        let mut s = vec![0.0; dk * dv];
        let mut o = vec![0.0; l * dv];
        let x = case.inputs();
        for (from, to) in [(0, 37), (37, 64), (64, 65), (65, 130)] {
            chunked(x.slice(from, to), from, &mut s, &mut o[from * dv..to * dv]);
        }
        // A chunk's first rows see the same inputs either way: the same bits; later
        // rows differ by rounding only.
        assert_eq!(o[..37 * dv], o_whole[..37 * dv]);
        assert!(max_diff(&o, &o_whole) < 1e-5);
        assert!(max_diff(&s, &s_whole) < 1e-5);
    }

    #[test]
    fn one_token_with_beta_one_stores_v_exactly() {
        // S = 0, beta = 1, unit k: S becomes k ⊗ v, and reading with q = k gives v.
        let (dk, dv) = (4, 3);
        let k = vec![0.0, 1.0, 0.0, 0.0];
        let v = vec![0.5, -2.0, 3.0];
        let x = HeadInputs {
            q: &k,
            k: &k,
            v: &v,
            g: &[0.0],
            beta: &[1.0],
            dk,
            dv,
        };
        let mut s = vec![0.0; dk * dv];
        let mut o = vec![0.0; dv];
        recurrent(x, &mut s, &mut o);
        assert_eq!(o, v);
        assert_eq!(&s[dv..2 * dv], &v[..]);
    }
}
