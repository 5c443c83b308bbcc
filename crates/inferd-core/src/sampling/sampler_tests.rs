//! Tests of [`Sampler`] against independent references (f64 softmax with std `exp`).

use super::*;
use crate::sampling::Dry;

fn params(f: impl FnOnce(&mut SamplingParams)) -> SamplingParams {
    let mut p = SamplingParams {
        seed: Some(1234),
        ..Default::default()
    };
    f(&mut p);
    p
}

/// Reference softmax in f64 with std `exp`.
fn softmax(logits: &[f32], temp: f64) -> Vec<f64> {
    let max = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
    let e: Vec<f64> = logits
        .iter()
        .map(|&l| ((l as f64 - max) / temp).exp())
        .collect();
    let s: f64 = e.iter().sum();
    e.iter().map(|x| x / s).collect()
}

/// Draw `n` tokens and count them per id.
fn histogram(p: SamplingParams, logits: &[f32], n: usize) -> Vec<usize> {
    let mut s = Sampler::new(p);
    let mut h = vec![0; logits.len()];
    for _ in 0..n {
        h[s.sample(logits, &[], &[]).token as usize] += 1;
    }
    h
}

/// Each count within 5 standard deviations of `n * prob` (binomial).
fn assert_matches_probs(h: &[usize], probs: &[f64], n: usize) {
    for (i, (&c, &p)) in h.iter().zip(probs).enumerate() {
        let mean = n as f64 * p;
        let sd = (n as f64 * p * (1.0 - p)).sqrt();
        assert!(
            (c as f64 - mean).abs() <= 5.0 * sd + 1e-9,
            "token {i}: count {c}, expected {mean:.1} ± {sd:.1}"
        );
    }
}

fn pseudo_logits(n: usize, seed: u64) -> Vec<f32> {
    let mut r = Xoshiro256::from_seed(seed);
    (0..n).map(|_| (r.next_f64() * 12.0 - 6.0) as f32).collect()
}

#[test]
fn greedy_is_argmax_with_lowest_index_tie_break() {
    let mut s = Sampler::new(SamplingParams::greedy());
    assert_eq!(s.sample(&[0.1, 3.0, -1.0, 2.9], &[], &[]).token, 1);
    assert_eq!(s.sample(&[0.1, 3.0, -1.0, 3.0], &[], &[]).token, 1);
    assert_eq!(s.sample(&[-5.0, -5.0], &[], &[]).token, 0);
    let big = pseudo_logits(151_936, 9);
    let expect = big
        .iter()
        .enumerate()
        .fold((0, f32::MIN), |b, (i, &l)| if l > b.1 { (i, l) } else { b });
    assert_eq!(s.sample(&big, &[], &[]).token as usize, expect.0);
}

#[test]
fn temperature_to_zero_approaches_greedy() {
    let logits = [1.0f32, 1.5, 1.49, -2.0];
    for seed in 0..300 {
        let mut s = Sampler::new(params(|p| {
            p.temperature = 1e-3;
            p.seed = Some(seed);
        }));
        assert_eq!(s.sample(&logits, &[], &[]).token, 1);
    }
}

#[test]
fn top_k_one_equals_greedy() {
    let mut greedy = Sampler::new(SamplingParams::greedy());
    for seed in 0..50 {
        let logits = pseudo_logits(1000, seed);
        let mut s = Sampler::new(params(|p| {
            p.top_k = 1;
            p.temperature = 1.5;
            p.seed = Some(seed);
        }));
        assert_eq!(
            s.sample(&logits, &[], &[]),
            greedy.sample(&logits, &[], &[])
        );
    }
}

#[test]
fn sampling_frequencies_match_softmax() {
    let logits = [0.5f32, 1.0, -0.3, 2.0, 0.0, -1.5];
    let n = 200_000;
    let h = histogram(params(|_| {}), &logits, n);
    assert_matches_probs(&h, &softmax(&logits, 1.0), n);
    // temperature 0.7 rescales the logits.
    let h = histogram(params(|p| p.temperature = 0.7), &logits, n);
    assert_matches_probs(&h, &softmax(&logits, 0.7), n);
}

#[test]
fn top_k_renormalises_over_the_k_best() {
    let logits = [0.5f32, 1.0, -0.3, 2.0, 0.0, -1.5];
    let n = 100_000;
    let h = histogram(params(|p| p.top_k = 3), &logits, n);
    // keeps ids 3, 1, 0
    let kept = [
        0.5f32,
        1.0,
        f32::NEG_INFINITY,
        2.0,
        f32::NEG_INFINITY,
        f32::NEG_INFINITY,
    ];
    assert_matches_probs(&h, &softmax(&kept, 1.0), n);
    assert_eq!(h[2] + h[4] + h[5], 0);
}

#[test]
fn top_p_keeps_smallest_prefix_and_renormalises() {
    // probs 0.5, 0.25, 0.125, 0.125
    let logits: Vec<f32> = [0.5f64, 0.25, 0.125, 0.125]
        .iter()
        .map(|p| p.ln() as f32)
        .collect();
    let n = 100_000;
    let h = histogram(params(|p| p.top_p = 0.7), &logits, n);
    assert_eq!(h[2] + h[3], 0, "{h:?}");
    assert_matches_probs(&h, &[2.0 / 3.0, 1.0 / 3.0, 0.0, 0.0], n);
    let h = histogram(params(|p| p.top_p = 0.45), &logits, 1000);
    assert_eq!(h[0], 1000);
}

#[test]
fn min_p_drops_tokens_below_fraction_of_top() {
    // probs proportional to 8, 4, 2, 1 → min_p 0.3 keeps 8 and 4 (2/8 = 0.25 < 0.3).
    let logits: Vec<f32> = [8.0f64, 4.0, 2.0, 1.0]
        .iter()
        .map(|w| w.ln() as f32)
        .collect();
    let n = 100_000;
    let h = histogram(params(|p| p.min_p = 0.3), &logits, n);
    assert_eq!(h[2] + h[3], 0);
    assert_matches_probs(&h, &[2.0 / 3.0, 1.0 / 3.0, 0.0, 0.0], n);
}

#[test]
fn draw_is_inverse_cdf_of_the_seeded_uniform() {
    let logits = [0.3f32, -0.2, 1.1, 0.0, 0.7];
    let probs = softmax(&logits, 1.0);
    for seed in 0..200u64 {
        let u = Xoshiro256::from_seed(seed).next_f64();
        let mut cum = 0.0;
        let expect = probs.iter().position(|p| {
            cum += p;
            cum > u
        });
        let got = Sampler::new(params(|p| p.seed = Some(seed))).sample(&logits, &[], &[]);
        // Skip draws within rounding distance of a CDF step.
        let near_step = probs
            .iter()
            .scan(0.0, |c, p| {
                *c += p;
                Some(*c)
            })
            .any(|c| (c - u).abs() < 1e-12);
        if !near_step {
            assert_eq!(Some(got.token as usize), expect, "seed {seed}");
        }
    }
}

#[test]
fn same_seed_same_tokens_different_seed_differs() {
    let logits = pseudo_logits(5000, 3);
    let run = |seed| {
        let mut s = Sampler::new(params(|p| {
            p.seed = Some(seed);
            p.top_p = 0.95;
            p.temperature = 1.3;
        }));
        (0..64)
            .map(|_| s.sample(&logits, &[], &[]).token)
            .collect::<Vec<_>>()
    };
    assert_eq!(run(77), run(77));
    assert_ne!(run(77), run(78));
}

#[test]
fn logprobs_are_log_softmax_after_penalties_before_temperature() {
    let raw = [1.0f32, 2.0, -0.5, 0.25, 3.0];
    let prompt = [4u32];
    let generated = [1u32, 1, 3];
    let mut s = Sampler::new(params(|p| {
        p.temperature = 0.5;
        p.top_k = 2;
        p.repetition_penalty = 1.5;
        p.presence_penalty = 0.5;
        p.frequency_penalty = 0.25;
        p.logprobs = Some(3);
    }));
    let out = s.sample(&raw, &prompt, &generated);
    // Hand-computed penalised logits.
    let pen = [
        1.0f32,
        2.0 / 1.5 - 2.0 * 0.25 - 0.5,
        -0.5,
        0.25 / 1.5 - 0.25 - 0.5,
        3.0 / 1.5,
    ];
    let lp: Vec<f64> = softmax(&pen, 1.0).iter().map(|p| p.ln()).collect();
    let chosen = out.token as usize;
    assert!(
        chosen == 4 || chosen == 0,
        "top_k 2 keeps ids 4 and 0, got {chosen}"
    );
    assert!((out.logprob.unwrap() as f64 - lp[chosen]).abs() < 1e-6);
    let ids: Vec<u32> = out.top_logprobs.iter().map(|t| t.0).collect();
    assert_eq!(ids, vec![4, 0, 1]);
    for &(id, v) in &out.top_logprobs {
        assert!((v as f64 - lp[id as usize]).abs() < 1e-6);
    }
}

#[test]
fn penalties_change_the_greedy_choice_as_computed_by_hand() {
    // 3.0 / 2 = 1.5 < 1.6: the repeated token loses under repetition penalty 2.
    let logits = [3.0f32, 1.6];
    let mut s = Sampler::new(SamplingParams {
        repetition_penalty: 2.0,
        ..SamplingParams::greedy()
    });
    assert_eq!(s.sample(&logits, &[0], &[]).token, 1);
    // frequency 0.5 x 3 occurrences: 3.0 - 1.5 = 1.5 < 1.6; only 2 occurrences: 2.0 > 1.6.
    let mut s = Sampler::new(SamplingParams {
        frequency_penalty: 0.5,
        ..SamplingParams::greedy()
    });
    assert_eq!(s.sample(&logits, &[], &[0, 0, 0]).token, 1);
    assert_eq!(s.sample(&logits, &[], &[0, 0]).token, 0);
    // prompt occurrences do not count for presence: 3.0 stays.
    let mut s = Sampler::new(SamplingParams {
        presence_penalty: 2.0,
        ..SamplingParams::greedy()
    });
    assert_eq!(s.sample(&logits, &[0, 0], &[]).token, 0);
    assert_eq!(s.sample(&logits, &[], &[0]).token, 1);
}

#[test]
fn logit_bias_bans_forces_and_shifts_as_openai_describes() {
    let logits = [1.0, 3.0, 2.0, 0.5];
    let greedy = |bias: Vec<(u32, f32)>| {
        Sampler::new(params(|p| {
            p.temperature = 0.0;
            p.logprobs = Some(4);
            p.logit_bias = bias;
        }))
        .sample(&logits, &[0], &[])
    };
    assert_eq!(greedy(vec![]).token, 1);
    assert_eq!(greedy(vec![(1, -100.0)]).token, 2); // banned
    assert_eq!(greedy(vec![(3, 100.0)]).token, 3); // forced
    let shifted = greedy(vec![(0, 2.5)]);
    assert_eq!(shifted.token, 0);
    // Logprobs are those of the biased distribution.
    let lse = [3.5f64, 3.0, 2.0, 0.5]
        .iter()
        .map(|x| x.exp())
        .sum::<f64>()
        .ln();
    assert!((shifted.logprob.unwrap() as f64 - (3.5 - lse)).abs() < 1e-5);
    // With DRY on the same token, the bias still adds (folded into one entry).
    let mut s = Sampler::new(params(|p| {
        p.temperature = 0.0;
        p.logit_bias = vec![(2, 1.5)];
        p.dry = Dry {
            multiplier: 1.0,
            allowed_length: 1,
            ..Dry::default()
        };
    }));
    assert_eq!(s.sample(&logits, &[0], &[]).token, 2);
}

#[test]
fn input_logits_are_not_modified() {
    let logits = vec![1.0f32, 2.0, 3.0];
    let copy = logits.clone();
    let mut s = Sampler::new(params(|p| p.repetition_penalty = 1.3));
    s.sample(&logits, &[0, 1, 2], &[2]);
    assert_eq!(logits, copy);
}

#[test]
fn non_finite_logits_do_not_panic() {
    let nan = f32::NAN;
    let inf = f32::INFINITY;
    let all = [
        params(|p| p.logprobs = Some(2)),
        params(|p| {
            p.top_p = 0.9;
            p.top_k = 2;
            p.min_p = 0.1;
            p.logprobs = Some(5);
        }),
        SamplingParams {
            logprobs: Some(1),
            ..SamplingParams::greedy()
        },
    ];
    for p in all {
        let mut s = Sampler::new(p);
        // +inf dominates, NaN is never chosen.
        let out = s.sample(&[nan, 1.0, inf, -inf], &[], &[]);
        assert_eq!(out.token, 2);
        assert_eq!(out.logprob, Some(0.0));
        // All NaN/-inf: uniform, a valid id.
        for _ in 0..20 {
            let out = s.sample(&[nan, -inf, nan], &[0, 9], &[1]);
            assert!(out.token < 3);
            assert!(out.logprob.unwrap().is_finite());
        }
        assert_eq!(s.sample(&[], &[], &[]).token, 0);
        // Out-of-vocab history ids are ignored.
        assert!(s.sample(&[0.0, 1.0], &[u32::MAX], &[7]).token < 2);
    }
}

#[test]
fn invalid_params_do_not_panic() {
    let weird = SamplingParams {
        temperature: f32::NAN,
        top_p: -1.0,
        min_p: 5.0,
        repetition_penalty: -3.0,
        presence_penalty: f32::INFINITY,
        frequency_penalty: f32::NAN,
        top_k: usize::MAX,
        seed: Some(1),
        logprobs: Some(usize::MAX),
        dry: Dry {
            multiplier: f32::INFINITY,
            base: f32::NAN,
            allowed_length: 0,
            ..Dry::default()
        },
        // Out of the vocabulary, repeated, out of range: ignored or applied, no panic.
        logit_bias: vec![(99, 1.0), (0, -1.0), (0, -2.0)],
    };
    let mut s = Sampler::new(weird.clone());
    let out = s.sample(&[0.0, 1.0, 0.5], &[0], &[1]);
    assert_eq!(out.token, 1); // NaN temperature → greedy
    assert_eq!(out.top_logprobs.len(), 3);
    let mut s = Sampler::new(SamplingParams {
        temperature: 1.0,
        ..weird
    });
    assert!(s.sample(&[0.0, 1.0, 0.5], &[0], &[1]).token < 3);
}

/// Timing on a 151,936-token vocabulary (run with `--ignored --nocapture`).
#[test]
#[ignore]
fn timing_large_vocab() {
    let logits = pseudo_logits(151_936, 5);
    let hist: Vec<u32> = (0..2000).map(|i| i * 37 % 151_936).collect();
    let cases = [
        ("greedy", SamplingParams::greedy()),
        ("t=1 plain", params(|_| {})),
        ("top_k=40", params(|p| p.top_k = 40)),
        ("top_p=0.95", params(|p| p.top_p = 0.95)),
        (
            "top_p=0.9 sharp (t=0.3)",
            params(|p| {
                p.top_p = 0.9;
                p.temperature = 0.3;
            }),
        ),
        (
            "penalties+logprobs 5",
            params(|p| {
                p.repetition_penalty = 1.1;
                p.frequency_penalty = 0.2;
                p.logprobs = Some(5);
            }),
        ),
    ];
    for (name, p) in cases {
        let mut s = Sampler::new(p);
        // Minimum over calls: robust to other processes sharing the machine.
        let best = (0..60)
            .map(|_| {
                let t = std::time::Instant::now();
                std::hint::black_box(s.sample(&logits, &hist, &hist[..100]));
                t.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min);
        println!("{name}: {:.3} ms/call (min of 60)", best * 1e3);
    }
}

/// Bitset with the given ids allowed.
fn mask(ids: &[u32], vocab: usize) -> Vec<u32> {
    let mut w = vec![0u32; vocab.div_ceil(32)];
    for &t in ids {
        w[t as usize / 32] |= 1 << (t % 32);
    }
    w
}

#[test]
fn a_mask_limits_greedy_and_random_choice_to_allowed_tokens() {
    let logits = pseudo_logits(100, 7);
    let allowed = [3u32, 40, 77];
    let m = mask(&allowed, 100);
    let best = *allowed
        .iter()
        .max_by(|a, b| logits[**a as usize].total_cmp(&logits[**b as usize]))
        .unwrap();
    let mut g = Sampler::new(SamplingParams::greedy());
    assert_eq!(g.sample_with(&logits, &[], &[], &masked(&m)).token, best);
    let mut s = Sampler::new(params(|p| p.temperature = 1.0));
    let mut seen = [0usize; 100];
    for _ in 0..3000 {
        seen[s.sample_with(&logits, &[], &[], &masked(&m)).token as usize] += 1;
    }
    // Only allowed tokens, in the proportions of softmax over the allowed ones.
    let sub: Vec<f32> = allowed.iter().map(|&t| logits[t as usize]).collect();
    let probs = softmax(&sub, 1.0);
    let h: Vec<usize> = allowed.iter().map(|&t| seen[t as usize]).collect();
    assert_eq!(h.iter().sum::<usize>(), 3000);
    assert_matches_probs(&h, &probs, 3000);
}

#[test]
fn masked_logprobs_are_those_of_the_allowed_distribution() {
    let logits = [1.0f32, 2.0, 3.0, 4.0];
    let m = mask(&[0, 1], 4);
    let mut s = Sampler::new(params(|p| {
        p.temperature = 0.0;
        p.logprobs = Some(2);
    }));
    let out = s.sample_with(&logits, &[], &[], &masked(&m));
    assert_eq!(out.token, 1);
    let p1 = (std::f64::consts::E / (1.0 + std::f64::consts::E)).ln();
    assert!((out.logprob.unwrap() as f64 - p1).abs() < 1e-5);
    assert_eq!(out.top_logprobs[0].0, 1);
}

#[test]
fn allowed_tokens_with_no_finite_logit_are_uniform_and_ids_past_the_mask_are_refused() {
    let mut logits = vec![0.5f32; 70];
    logits[5] = f32::NAN;
    logits[6] = f32::NEG_INFINITY;
    let m = mask(&[5, 6], 64); // 2 words: ids 64.. are past the mask
    let mut s = Sampler::new(params(|p| p.temperature = 1.0));
    let mut seen = [0usize; 70];
    for _ in 0..400 {
        seen[s.sample_with(&logits, &[], &[], &masked(&m)).token as usize] += 1;
    }
    assert_eq!(seen[5] + seen[6], 400);
    assert!(seen[5] > 100 && seen[6] > 100, "{seen:?}");
}

fn masked(m: &[u32]) -> Extra<'_> {
    Extra {
        allowed: Some(m),
        breaks: &[],
    }
}

#[test]
fn dry_turns_a_greedy_loop_aside() {
    // Token 0 is the favourite; after a run of it, DRY makes token 1 win.
    let mut logits = vec![0.0f32; 4];
    logits[0] = 2.0;
    logits[1] = 1.5;
    let mut p = SamplingParams::greedy();
    p.dry.multiplier = 0.8;
    let mut s = Sampler::new(p);
    let run = [0u32; 6];
    let out = s.sample_with(
        &logits,
        &[],
        &run,
        &Extra {
            allowed: None,
            breaks: &[false; 6],
        },
    );
    assert_eq!(out.token, 1);
    // breakers everywhere: no penalty, the favourite stays
    let out = s.sample_with(
        &logits,
        &[],
        &run,
        &Extra {
            allowed: None,
            breaks: &[true; 6],
        },
    );
    assert_eq!(out.token, 0);
}

/// `is_plain_argmax` holds exactly when `sample_with` is the argmax of the raw logits
/// (with its rules for NaN, infinities and ties), which a backend may then take itself.
#[test]
fn plain_argmax_is_what_sample_with_draws() {
    let rows: Vec<Vec<f32>> = vec![
        vec![0.5, 2.0, 2.0, -1.0],
        vec![f32::NAN, 1.0, f32::INFINITY, f32::INFINITY],
        vec![f32::NEG_INFINITY; 4],
        vec![f32::NAN; 4],
        vec![-3.0, -2.0, -2.5, -2.0],
    ];
    let plain = |l: &[f32]| {
        let v: Vec<f32> = l
            .iter()
            .map(|&x| {
                if x.is_nan() {
                    f32::NEG_INFINITY
                } else if x == f32::INFINITY {
                    f32::MAX
                } else {
                    x
                }
            })
            .collect();
        let mut best = 0;
        for (i, &x) in v.iter().enumerate() {
            if x > v[best] {
                best = i;
            }
        }
        best as u32
    };
    let mut s = Sampler::new(SamplingParams::greedy());
    assert!(s.is_plain_argmax(&Extra::default()));
    for l in &rows {
        assert_eq!(
            s.sample_with(l, &[], &[], &Extra::default()).token,
            plain(l),
            "{l:?}"
        );
    }
    let mask = [0b1u32];
    assert!(!s.is_plain_argmax(&Extra {
        allowed: Some(&mask),
        breaks: &[]
    }));
    assert!(s.is_plain_argmax(&Extra {
        allowed: Some(&[0]),
        breaks: &[]
    }));
    for change in [
        |p: &mut SamplingParams| p.temperature = 0.7,
        |p: &mut SamplingParams| p.logprobs = Some(0),
        |p: &mut SamplingParams| p.presence_penalty = 0.1,
        |p: &mut SamplingParams| p.repetition_penalty = 1.1,
        |p: &mut SamplingParams| p.dry.multiplier = 0.8,
    ] {
        let mut p = SamplingParams::greedy();
        change(&mut p);
        assert!(!Sampler::new(p).is_plain_argmax(&Extra::default()));
    }
}

#[test]
fn a_fork_draws_what_the_sampler_draws_that_many_draws_later() {
    let logits: Vec<Vec<f32>> = (0..6).map(|i| pseudo_logits(64, 100 + i)).collect();
    for p in [
        params(|p| {
            p.temperature = 0.9;
            p.top_p = 0.95;
        }),
        params(|p| p.temperature = 0.0),
    ] {
        let mut plain = Sampler::new(p.clone());
        let before = Sampler::new(p);
        let drawn: Vec<u32> = logits
            .iter()
            .map(|l| plain.sample(l, &[], &[]).token)
            .collect();
        for (k, l) in logits.iter().enumerate() {
            assert_eq!(
                before.fork(k).sample(l, &[], &[]).token,
                drawn[k],
                "draw {k}"
            );
        }
        // A fork's own later draws go on as the sampler's.
        let mut f = before.fork(3);
        let later: Vec<u32> = logits[3..]
            .iter()
            .map(|l| f.sample(l, &[], &[]).token)
            .collect();
        assert_eq!(later, drawn[3..]);
    }
}
