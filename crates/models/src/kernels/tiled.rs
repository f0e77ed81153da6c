//! The portable path's product for linear layers: `dst = w · x` for a row-major
//! `[rows, inp]` weight and feature-major `[inp, t]` activations, in plain Rust that
//! LLVM vectorizes for any target (SSE2 on generic x86-64, NEON on aarch64), where the
//! other paths use `gemm`'s hand-written AVX2 and AVX-512 kernels.
//!
//! It works in dot-product form: a tile of tokens is transposed once to token-major
//! rows, then each block of `R` weight rows × `J` tokens is `R · J` vector accumulators
//! along `inp` — two streams of contiguous loads and no broadcasts (which cost two
//! instructions each on SSE2), reduced across lanes once at the end.

use super::{fma, Parallelism, PORTABLE_FMA};
use rayon::prelude::*;

/// Lanes of one vector (SSE2 and NEON both hold 4 f32).
const W: usize = 4;
/// Tokens per transposed tile (`TILE · inp` floats: 192 KiB for `inp` = 1,536).
const TILE: usize = 32;
/// Weight rows and tokens per register block: `R · J` accumulators plus `R + J` loads
/// fit SSE2's 16 registers; NEON has 32.
#[cfg(not(target_arch = "aarch64"))]
const R: usize = 3;
#[cfg(not(target_arch = "aarch64"))]
const J: usize = 3;
#[cfg(target_arch = "aarch64")]
const R: usize = 4;
#[cfg(target_arch = "aarch64")]
const J: usize = 4;

/// `dst = w · x` (`+=` with `accumulate`): `w` is `[rows, inp]`, `x` is `[inp, t]`,
/// `dst` is `[rows, t]`, all row-major and dense. `par` splits the rows over the
/// thread pool. Panics if a slice is short.
pub fn matmul(
    dst: &mut [f32],
    w: &[f32],
    rows: usize,
    x: &[f32],
    t: usize,
    accumulate: bool,
    par: Parallelism,
) {
    if rows == 0 || t == 0 {
        return;
    }
    assert!(w.len().is_multiple_of(rows), "tiled matmul: weight shape");
    let inp = w.len() / rows;
    assert!(x.len() >= inp * t, "tiled matmul: activations too short");
    assert!(dst.len() >= rows * t, "tiled matmul: dst too small");
    let dst = &mut dst[..rows * t];
    // Rows per task: whole register blocks, about four tasks per thread.
    let threads = match par {
        Parallelism::None => 1,
        _ => rayon::current_num_threads().max(1),
    };
    let per = rows.div_ceil(4 * threads).div_ceil(R).max(1) * R;
    let task = |(i, d): (usize, &mut [f32])| {
        let r0 = i * per;
        let n = d.len() / t;
        let mut xt = Vec::new();
        block_rows(
            d,
            &w[r0 * inp..(r0 + n) * inp],
            n,
            x,
            inp,
            t,
            accumulate,
            &mut xt,
        );
    };
    if threads > 1 && rows > per {
        dst.par_chunks_mut(per * t).enumerate().for_each(task);
    } else {
        dst.chunks_mut(per * t).enumerate().for_each(task);
    }
}

/// [`matmul`] of `rows` weight rows on this thread, `xt` scratch for a transposed tile.
#[allow(clippy::too_many_arguments)]
fn block_rows(
    dst: &mut [f32],
    w: &[f32],
    rows: usize,
    x: &[f32],
    inp: usize,
    t: usize,
    accumulate: bool,
    xt: &mut Vec<f32>,
) {
    let mut c0 = 0;
    while c0 < t {
        let tc = TILE.min(t - c0);
        // Tokens c0.. of x as token-major rows of `inp`.
        xt.clear();
        xt.resize(tc * inp, 0.0);
        for k in 0..inp {
            for (j, &v) in x[k * t + c0..k * t + c0 + tc].iter().enumerate() {
                xt[j * inp + k] = v;
            }
        }
        let mut r = 0;
        while r < rows {
            let nr = R.min(rows - r);
            let mut j = 0;
            while j < tc {
                let nj = J.min(tc - j);
                let out = Out {
                    dst: &mut *dst,
                    t,
                    row: r,
                    col: c0 + j,
                    accumulate,
                };
                let ws = &w[r * inp..(r + nr) * inp];
                let xs = &xt[j * inp..(j + nj) * inp];
                macro_rules! go {
                    ($($r:literal, $j:literal);*) => {
                        match (nr, nj) {
                            $(($r, $j) => dots::<$r, $j>(ws, xs, inp, out),)*
                            _ => unreachable!("block of {nr} x {nj}"),
                        }
                    };
                }
                #[cfg(not(target_arch = "aarch64"))]
                go!(3, 3; 3, 2; 3, 1; 2, 3; 2, 2; 2, 1; 1, 3; 1, 2; 1, 1);
                #[cfg(target_arch = "aarch64")]
                go!(4, 4; 4, 3; 4, 2; 4, 1; 3, 4; 3, 3; 3, 2; 3, 1; 2, 4; 2, 3; 2, 2; 2, 1;
                    1, 4; 1, 3; 1, 2; 1, 1);
                j += nj;
            }
            r += nr;
        }
        c0 += tc;
    }
}

/// Where a register block's results go: `dst[(row + i) * t + col + j]`.
struct Out<'a> {
    dst: &'a mut [f32],
    t: usize,
    row: usize,
    col: usize,
    accumulate: bool,
}

/// The `RB × JB` dot products of `RB` weight rows and `JB` token rows, each `inp` long.
#[inline(always)]
fn dots<const RB: usize, const JB: usize>(ws: &[f32], xs: &[f32], inp: usize, out: Out<'_>) {
    const F: bool = PORTABLE_FMA;
    let ku = inp / W * W;
    let mut acc = [[[0f32; W]; JB]; RB];
    let wr: [&[f32]; RB] = std::array::from_fn(|i| &ws[i * inp..i * inp + ku]);
    let xr: [&[f32]; JB] = std::array::from_fn(|j| &xs[j * inp..j * inp + ku]);
    let mut k = 0;
    while k < ku {
        let wv: [[f32; W]; RB] = std::array::from_fn(|i| {
            let s = &wr[i][k..k + W];
            std::array::from_fn(|l| s[l])
        });
        let xv: [[f32; W]; JB] = std::array::from_fn(|j| {
            let s = &xr[j][k..k + W];
            std::array::from_fn(|l| s[l])
        });
        for i in 0..RB {
            for j in 0..JB {
                for l in 0..W {
                    acc[i][j][l] = fma::<F>(wv[i][l], xv[j][l], acc[i][j][l]);
                }
            }
        }
        k += W;
    }
    for i in 0..RB {
        for j in 0..JB {
            let a = acc[i][j];
            let mut s = (a[0] + a[2]) + (a[1] + a[3]);
            for kk in ku..inp {
                s = fma::<F>(ws[i * inp + kk], xs[j * inp + kk], s);
            }
            let d = &mut out.dst[(out.row + i) * out.t + out.col + j];
            if out.accumulate {
                *d += s;
            } else {
                *d = s;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Isa, MatRef};
    use super::*;

    #[test]
    fn tiled_matmul_matches_gemm() {
        for (rows, inp, t) in [
            (19, 37, 1),
            (8, 5, 70),
            (45, 384, 33),
            (3, 2, 7),
            (64, 129, 100),
            (1, 3, 1),
            (384, 1536, 256),
        ] {
            let w: Vec<f32> = (0..rows * inp)
                .map(|i| ((i * 7919) % 101) as f32 * 0.01 - 0.5)
                .collect();
            let x: Vec<f32> = (0..inp * t)
                .map(|i| ((i * 104_729) % 89) as f32 * 0.02 - 0.9)
                .collect();
            for accumulate in [false, true] {
                for par in [Parallelism::None, Parallelism::Rayon(0)] {
                    let start: Vec<f32> = (0..rows * t).map(|i| i as f32 * 0.1).collect();
                    let mut want = start.clone();
                    super::super::matmul(
                        Isa::Portable,
                        &mut want,
                        t,
                        MatRef::rows(&w, rows, inp, inp),
                        MatRef::rows(&x, inp, t, t),
                        accumulate,
                        Parallelism::None,
                    );
                    let mut got = start.clone();
                    matmul(&mut got, &w, rows, &x, t, accumulate, par);
                    for (g, w) in got.iter().zip(&want) {
                        assert!(
                            (g - w).abs() <= 1e-4 * w.abs().max(1.0),
                            "{rows}x{inp}x{t}: {g} vs {w}"
                        );
                    }
                }
            }
        }
    }
}
