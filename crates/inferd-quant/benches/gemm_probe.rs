use inferd_quant::{linear_planned, DType, LinearConfig, RowPath, WeightMatrix};
use std::time::Instant;
fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let rows: usize = args.first().map(|s| s.parse().unwrap()).unwrap_or(896);
    let cols: usize = args.get(1).map(|s| s.parse().unwrap()).unwrap_or(4864);
    let n: usize = args.get(2).map(|s| s.parse().unwrap()).unwrap_or(512);
    for dtype in [DType::F32, DType::Q4_1, DType::Q8_0] {
        let row: Vec<f32> = (0..cols)
            .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        let q = inferd_quant::quantize_row(dtype, &row);
        let data: Vec<u8> = (0..rows).flat_map(|_| q.iter().copied()).collect();
        let w = WeightMatrix::new(dtype, rows, cols, &data).unwrap();
        let x: Vec<f32> = (0..n * cols)
            .map(|i| ((i % 97) as f32 - 48.0) / 48.0)
            .collect();
        let mut y = vec![0f32; n * rows];
        let paths = vec![RowPath::Gemm; n];
        let cfg = LinearConfig::default();
        let mut best = f64::MAX;
        for _ in 0..15 {
            let t = Instant::now();
            linear_planned(&cfg, &w, &x, n, &paths, &mut y).unwrap();
            best = best.min(t.elapsed().as_secs_f64());
        }
        if dtype == DType::F32 {
            let wf: Vec<f32> = (0..rows).flat_map(|_| row.iter().copied()).collect();
            let mut bo = f64::MAX;
            for _ in 0..15 {
                let t = Instant::now();
                unsafe {
                    gemm::gemm(
                        n,
                        rows,
                        cols,
                        y.as_mut_ptr(),
                        1,
                        rows as isize,
                        false,
                        x.as_ptr(),
                        1,
                        cols as isize,
                        wf.as_ptr(),
                        cols as isize,
                        1,
                        0.0f32,
                        1.0f32,
                        false,
                        false,
                        false,
                        gemm::Parallelism::Rayon(rayon::current_num_threads()),
                    );
                }
                bo = bo.min(t.elapsed().as_secs_f64());
            }
            println!(
                "gemm crate F32: {:.2} ms {:.1} GF/s",
                bo * 1e3,
                2.0 * (rows * cols * n) as f64 / bo / 1e9
            );
        }
        println!(
            "{rows}x{cols} n={n} {dtype}: {:.2} ms {:.1} GF/s",
            best * 1e3,
            2.0 * (rows * cols * n) as f64 / best / 1e9
        );
    }
}
