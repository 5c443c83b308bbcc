//! Figures comparing two runs' logits over the same tokens (e.g. f32 vs Q8 KV).
//! Shared by the KV quality test and the `kv_quality` example.

#![allow(dead_code)]

/// How far run B's logits are from run A's (the reference).
#[derive(Clone, Debug, Default)]
pub struct LogitDiff {
    pub positions: usize,
    /// Positions where both runs' argmax agree.
    pub top1_agree: usize,
    pub max_abs: f32,
    /// Σ|Δlogit| over `n_logits` logits (every logit of every position).
    pub sum_abs: f64,
    pub n_logits: usize,
    /// Positions whose reference top-1/top-2 margin is at most `margin_ok` (near-ties).
    pub near_ties: usize,
    /// Positions of disagreement whose reference top-1/top-2 margin exceeds `margin_ok`.
    pub confident_flips: usize,
    /// Mean negative log-likelihood of the next token under A and B (nats).
    pub nll_a: f64,
    pub nll_b: f64,
    pub nll_count: usize,
}

impl LogitDiff {
    pub fn agreement(&self) -> f64 {
        self.top1_agree as f64 / self.positions.max(1) as f64
    }

    /// Mean |Δlogit| over every logit of every position.
    pub fn mean_abs(&self) -> f64 {
        self.sum_abs / self.n_logits.max(1) as f64
    }

    /// Adds another comparison's counts (e.g. another sequence).
    pub fn merge(&mut self, o: &LogitDiff) {
        self.positions += o.positions;
        self.top1_agree += o.top1_agree;
        self.max_abs = self.max_abs.max(o.max_abs);
        self.sum_abs += o.sum_abs;
        self.n_logits += o.n_logits;
        self.near_ties += o.near_ties;
        self.confident_flips += o.confident_flips;
        self.nll_a += o.nll_a;
        self.nll_b += o.nll_b;
        self.nll_count += o.nll_count;
    }

    pub fn ppl_a(&self) -> f64 {
        (self.nll_a / self.nll_count.max(1) as f64).exp()
    }

    pub fn ppl_b(&self) -> f64 {
        (self.nll_b / self.nll_count.max(1) as f64).exp()
    }

    pub fn summary(&self) -> String {
        format!(
            "{} positions: top-1 agreement {:.4} ({}/{}), max |Δlogit| {:.4}, mean |Δlogit| {:.5}, \
             near-ties {}, confident flips {}, next-token ppl {:.4} -> {:.4}",
            self.positions,
            self.agreement(),
            self.top1_agree,
            self.positions,
            self.max_abs,
            self.mean_abs(),
            self.near_ties,
            self.confident_flips,
            self.ppl_a(),
            self.ppl_b(),
        )
    }
}

/// (argmax, top-1 minus top-2) of a row.
fn top2(row: &[f32]) -> (usize, f32) {
    let (mut i1, mut v1, mut v2) = (0, f32::NEG_INFINITY, f32::NEG_INFINITY);
    for (i, &x) in row.iter().enumerate() {
        if x > v1 {
            (i1, v2, v1) = (i, v1, x);
        } else if x > v2 {
            v2 = x;
        }
    }
    (i1, v1 - v2)
}

/// -log softmax(row)[t]
fn nll(row: &[f32], t: usize) -> f64 {
    let m = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
    let lse = row.iter().map(|&x| (x as f64 - m).exp()).sum::<f64>().ln() + m;
    lse - row[t] as f64
}

/// Compares rows a[i], b[i] (logits at position i); `ids[i + 1]` is the next token of
/// position i (for the likelihoods). A top-1 change where A's margin exceeds `margin_ok`
/// counts as a confident flip.
pub fn compare(a: &[Vec<f32>], b: &[Vec<f32>], ids: &[u32], margin_ok: f32) -> LogitDiff {
    assert_eq!(a.len(), b.len());
    let mut d = LogitDiff::default();
    for (i, (ra, rb)) in a.iter().zip(b).enumerate() {
        let (ta, margin) = top2(ra);
        let (tb, _) = top2(rb);
        d.positions += 1;
        if margin <= margin_ok {
            d.near_ties += 1;
        }
        if ta == tb {
            d.top1_agree += 1;
        } else if margin > margin_ok {
            d.confident_flips += 1;
        }
        for (x, y) in ra.iter().zip(rb) {
            let e = (x - y).abs();
            d.max_abs = d.max_abs.max(e);
            d.sum_abs += e as f64;
        }
        d.n_logits += ra.len();
        if let Some(&next) = ids.get(i + 1) {
            d.nll_a += nll(ra, next as usize);
            d.nll_b += nll(rb, next as usize);
            d.nll_count += 1;
        }
    }
    d
}

/// A passage of ordinary English prose (a few hundred tokens) for quality figures.
pub const PASSAGE: &str = "\
The harbour town woke slowly in winter. Before the first ferry, the baker on the corner \
lit his ovens, and the smell of bread drifted down to the quay where fishermen were \
untangling nets that had frozen stiff overnight. Nobody hurried. The tide would come when \
it came, and the boats would leave when the water was deep enough to clear the sandbar \
at the mouth of the bay.

My grandmother kept the lighthouse for thirty-one years. She used to say that the job \
was mostly waiting and polishing: waiting for dusk, polishing the great glass lens until \
it threw the beam twenty miles out to sea. In storms she stayed awake all night, writing \
in a logbook the direction of the wind, the height of the waves and the names of any \
ships that passed. Those books still sit on a shelf in the town library, their pages \
yellow and curled, and children sometimes read them aloud on rainy afternoons.

When the lamp was finally automated, the council offered her a small pension and a \
cottage near the school. She accepted the cottage but refused to stop climbing the \
tower. Every evening at six she walked up the hundred and twelve steps, checked that the \
machine had started on time, and walked back down again. ‘A light that nobody watches,’ \
she told the mayor, ‘is only a light. A light that somebody watches is a promise.’

The economics of small harbours have changed since then. Tourism now brings more money \
than fish, and the old warehouses along the water have become cafes, galleries and \
rooms to rent for the summer. Yet in the quiet months the town returns to its older \
rhythm, and on clear nights you can still see the beam sweep across the water, patient \
and regular, counting the seconds between one wave and the next.";
