//! The product of a weight matrix and a short query's activations: `dst = w · x` with
//! `x` at most [`NARROW_MAX`] tokens wide. A general product would first pack the whole
//! weight matrix; here the weights are streamed once, straight from where they are, each
//! one broadcast and multiplied into the query's tokens (padded to whole vectors and
//! held in cache).
//!
//! One generic loop nest, [`narrow_lanes`], with the block shape as const generics:
//! `L` token lanes (a whole number of vectors), `ROWS` weight rows at a time and `KS`
//! interleaved partial sums per row, so that `ROWS · KS · L / lanes-per-vector`
//! accumulators stay in registers and hide the FMA latency. [`shape`] picks them per
//! instruction set and query length.

use super::{fma, multiversion, Isa, PORTABLE_FMA};

/// Most tokens [`narrow_matmul`] takes.
pub const NARROW_MAX: usize = 32;

/// One feature of a narrow product's activations, padded to [`NARROW_MAX`] tokens.
pub type Padded = [f32; NARROW_MAX];

/// `dst = w · x` (`+=` with `accumulate`) for a row-major `[rows, inp]` weight `w` and
/// feature-major `[inp, t]` activations `x` of at most [`NARROW_MAX`] tokens; `dst` is
/// `[rows, t]`, compiled for `isa`. Panics if `t` is 0 or over [`NARROW_MAX`] or a
/// slice is short.
#[allow(clippy::too_many_arguments)]
pub fn narrow_matmul(
    isa: Isa,
    dst: &mut [f32],
    w: &[f32],
    rows: usize,
    x: &[f32],
    t: usize,
    accumulate: bool,
    pad: &mut Vec<Padded>,
) {
    narrow_matmul_weights(
        isa,
        dst,
        Weights::F32(w),
        rows,
        x,
        t,
        accumulate,
        pad,
        &mut Vec::new(),
    );
}

/// A linear layer's weights for the narrow product: the model's f32, or a compact copy
/// (half or a quarter of the bytes) for the query path, where streaming the weights is
/// most of the time. Compact rows are widened to f32 a block at a time into a buffer
/// that stays in L1, then multiplied exactly as f32 rows are.
#[derive(Clone, Copy)]
pub enum Weights<'a> {
    /// Row-major `[rows, inp]` f32.
    F32(&'a [f32]),
    /// Row-major `[rows, inp]` bfloat16 (the upper half of each f32).
    Bf16(&'a [u16]),
    /// Row-major `[rows, inp]` int8, row `r` scaled by `scales[r]`.
    Int8 {
        /// The quantized weights.
        q: &'a [i8],
        /// One scale per row.
        scales: &'a [f32],
    },
}

impl<'a> Weights<'a> {
    /// Elements.
    pub fn len(&self) -> usize {
        match self {
            Weights::F32(w) => w.len(),
            Weights::Bf16(w) => w.len(),
            Weights::Int8 { q, .. } => q.len(),
        }
    }

    /// No elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Rows `r0..r1` of a matrix with `inp` columns.
    pub fn rows(&self, inp: usize, r0: usize, r1: usize) -> Weights<'a> {
        match *self {
            Weights::F32(w) => Weights::F32(&w[r0 * inp..r1 * inp]),
            Weights::Bf16(w) => Weights::Bf16(&w[r0 * inp..r1 * inp]),
            Weights::Int8 { q, scales } => Weights::Int8 {
                q: &q[r0 * inp..r1 * inp],
                scales: &scales[r0..r1],
            },
        }
    }
}

/// `w` rounded to bfloat16 (to nearest, ties to even).
pub fn to_bf16(w: &[f32]) -> Vec<u16> {
    w.iter()
        .map(|&v| {
            let b = v.to_bits();
            if v.is_nan() {
                (b >> 16) as u16 | 0x40
            } else {
                (b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16) as u16
            }
        })
        .collect()
}

/// `w` (`rows` rows) as symmetric int8 with one scale per row (its largest magnitude
/// maps to 127).
pub fn to_int8(w: &[f32], rows: usize) -> (Vec<i8>, Vec<f32>) {
    let inp = w.len() / rows.max(1);
    let mut q = Vec::with_capacity(w.len());
    let mut scales = Vec::with_capacity(rows);
    for row in w.chunks_exact(inp.max(1)) {
        let max = row.iter().fold(0f32, |m, &v| m.max(v.abs()));
        let scale = if max > 0.0 { max / 127.0 } else { 1.0 };
        scales.push(scale);
        q.extend(
            row.iter()
                .map(|&v| (v / scale).round().clamp(-127.0, 127.0) as i8),
        );
    }
    (q, scales)
}

/// [`narrow_matmul`] over weights in any [`Weights`] format; `buf` is scratch for the
/// widened rows.
#[allow(clippy::too_many_arguments)]
pub fn narrow_matmul_weights(
    isa: Isa,
    dst: &mut [f32],
    w: Weights<'_>,
    rows: usize,
    x: &[f32],
    t: usize,
    accumulate: bool,
    pad: &mut Vec<Padded>,
    buf: &mut Vec<f32>,
) {
    let isa = isa.capped();
    narrow_weights_for(isa, lanes(isa), dst, w, rows, x, t, accumulate, pad, buf);
}

multiversion!(
    /// [`narrow_matmul_weights`] compiled for an instruction set.
    narrow_weights_for => narrow_weights_imp(
        lanes: usize,
        dst: &mut [f32],
        w: Weights<'_>,
        rows: usize,
        x: &[f32],
        t: usize,
        accumulate: bool,
        pad: &mut Vec<Padded>,
        buf: &mut Vec<f32>
    )
);

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn narrow_weights_imp<const FMA: bool>(
    lanes: usize,
    dst: &mut [f32],
    w: Weights<'_>,
    rows: usize,
    x: &[f32],
    t: usize,
    accumulate: bool,
    pad: &mut Vec<Padded>,
    buf: &mut Vec<f32>,
) {
    if let Weights::F32(w) = w {
        return narrow_matmul_imp::<FMA>(lanes, dst, w, rows, x, t, accumulate, pad);
    }
    assert!(
        rows > 0 && w.len().is_multiple_of(rows),
        "narrow_matmul: weight shape"
    );
    if let Weights::Int8 { scales, .. } = &w {
        assert_eq!(scales.len(), rows, "narrow_matmul: one scale per row");
    }
    let inp = w.len() / rows;
    assert!(dst.len() >= rows * t, "narrow_matmul: dst too small");
    // Blocks of rows widened into `buf` (18 KiB for 384 inputs, 72 KiB for 1,536: L1
    // and L2), each through the f32 kernel; 12 rows are whole row blocks of every shape.
    const BLOCK: usize = 12;
    buf.resize(BLOCK * inp, 0.0);
    let mut r0 = 0;
    while r0 < rows {
        let n = BLOCK.min(rows - r0);
        let b = &mut buf[..n * inp];
        match &w {
            Weights::F32(_) => unreachable!(),
            Weights::Bf16(h) => {
                for (d, &s) in b.iter_mut().zip(&h[r0 * inp..(r0 + n) * inp]) {
                    *d = f32::from_bits(u32::from(s) << 16);
                }
            }
            Weights::Int8 { q, scales } => {
                for (j, d) in b.chunks_exact_mut(inp).enumerate() {
                    let sc = scales[r0 + j];
                    for (d, &s) in d.iter_mut().zip(&q[(r0 + j) * inp..(r0 + j + 1) * inp]) {
                        *d = f32::from(s) * sc;
                    }
                }
            }
        }
        // The activations are padded once, by the first block.
        if r0 == 0 {
            narrow_matmul_imp::<FMA>(lanes, &mut dst[..n * t], b, n, x, t, accumulate, pad);
        } else {
            narrow_padded::<FMA>(
                lanes,
                &mut dst[r0 * t..(r0 + n) * t],
                b,
                n,
                &pad[..inp],
                t,
                accumulate,
            );
        }
        r0 += n;
    }
}

/// f32 lanes of one vector register.
fn lanes(isa: Isa) -> usize {
    match isa {
        Isa::Avx512 => 16,
        Isa::Avx2 => 8,
        Isa::Portable => 4,
    }
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn narrow_matmul_imp<const FMA: bool>(
    lanes: usize,
    dst: &mut [f32],
    w: &[f32],
    rows: usize,
    x: &[f32],
    t: usize,
    accumulate: bool,
    pad: &mut Vec<Padded>,
) {
    assert!((1..=NARROW_MAX).contains(&t), "narrow_matmul: {t} tokens");
    assert!(
        rows > 0 && w.len().is_multiple_of(rows),
        "narrow_matmul: weight shape"
    );
    let inp = w.len() / rows;
    assert!(x.len() >= inp * t, "narrow_matmul: activations too short");
    assert!(dst.len() >= rows * t, "narrow_matmul: dst too small");
    pad.clear();
    pad.extend(x[..inp * t].chunks_exact(t).map(|f| {
        let mut v = [0.0; NARROW_MAX];
        v[..t].copy_from_slice(f);
        v
    }));
    narrow_padded::<FMA>(lanes, dst, w, rows, &pad[..inp], t, accumulate);
}

/// [`narrow_matmul_imp`] with the activations already padded.
#[inline(always)]
fn narrow_padded<const FMA: bool>(
    lanes: usize,
    dst: &mut [f32],
    w: &[f32],
    rows: usize,
    xp: &[Padded],
    t: usize,
    accumulate: bool,
) {
    // Token lanes rounded up to whole vectors; rows × partial sums × vectors per row
    // accumulators: at most 16 of AVX-512's 32 registers, 12 of AVX2's 16, 8 of the
    // portable 16 (SSE2) or 32 (NEON).
    macro_rules! go {
        ($l:literal, $rows:literal, $ks:literal) => {
            narrow_lanes::<FMA, $l, $rows, $ks>(dst, w, rows, xp, t, accumulate)
        };
    }
    match (lanes, t) {
        (16, 1..=16) => go!(16, 4, 2),
        (16, _) => go!(32, 4, 1),
        (8, 1..=8) => go!(8, 4, 2),
        (8, 9..=16) => go!(16, 2, 3),
        (8, 17..=24) => go!(24, 4, 1),
        (8, _) => go!(32, 3, 1),
        (_, 1..=4) => go!(4, 4, 2),
        (_, 5..=8) => go!(8, 4, 1),
        (_, 9..=16) => go!(16, 2, 1),
        (_, _) => go!(32, 1, 1),
    }
}

/// [`narrow_matmul`] over the first `L` lanes of each padded feature, `ROWS` weight rows
/// at a time with `KS` partial sums each (by `k` mod `KS`).
///
/// Keep this shape (the lane count a const generic, one helper per FMA row): LLVM
/// vectorizes it to one FMA per weight and vector, while the same loops with the lanes
/// written as a literal 16 compiled to code 15× slower (`nc-bench memory`'s
/// `embed_query_p50_ms` went from 3.8 to 64 ms). Measure that after any change here.
#[inline(always)]
fn narrow_lanes<const FMA: bool, const L: usize, const ROWS: usize, const KS: usize>(
    dst: &mut [f32],
    w: &[f32],
    rows: usize,
    xp: &[Padded],
    t: usize,
    accumulate: bool,
) {
    let inp = xp.len();
    let ku = inp / KS * KS;
    let blocks = rows / ROWS;
    for b in 0..blocks {
        let r0 = b * ROWS;
        let ws: [&[f32]; ROWS] = std::array::from_fn(|j| &w[(r0 + j) * inp..(r0 + j) * inp + ku]);
        let mut acc = [[[0f32; L]; KS]; ROWS];
        for (c, xk) in xp[..ku].chunks_exact(KS).enumerate() {
            let k = c * KS;
            for j in 0..ROWS {
                let wk = &ws[j][k..k + KS];
                for i in 0..KS {
                    lanes_fma::<FMA, L>(wk[i], &xk[i], &mut acc[j][i]);
                }
            }
        }
        for (j, a) in acc.iter_mut().enumerate() {
            let r = r0 + j;
            for k in ku..inp {
                lanes_fma::<FMA, L>(w[r * inp + k], &xp[k], &mut a[0]);
            }
            let mut sum = a[0];
            for p in &a[1..] {
                for l in 0..L {
                    sum[l] += p[l];
                }
            }
            store_row(&mut dst[r * t..(r + 1) * t], &sum, accumulate);
        }
    }
    for r in blocks * ROWS..rows {
        let wr = &w[r * inp..(r + 1) * inp];
        let mut acc = [0f32; L];
        for (a, xv) in wr.iter().zip(xp) {
            lanes_fma::<FMA, L>(*a, xv, &mut acc);
        }
        store_row(&mut dst[r * t..(r + 1) * t], &acc, accumulate);
    }
}

/// `c += a · b` over the first `L` lanes of `b`, for a scalar `a`.
#[inline(always)]
fn lanes_fma<const FMA: bool, const L: usize>(a: f32, b: &Padded, c: &mut [f32; L]) {
    for l in 0..L {
        c[l] = fma::<FMA>(a, b[l], c[l]);
    }
}

/// The first `d.len()` lanes of `acc` into `d` (added with `accumulate`).
#[inline(always)]
fn store_row<const L: usize>(d: &mut [f32], acc: &[f32; L], accumulate: bool) {
    if accumulate {
        d.iter_mut().zip(acc).for_each(|(d, a)| *d += a);
    } else {
        d.copy_from_slice(&acc[..d.len()]);
    }
}

#[cfg(test)]
mod tests {
    use super::super::{matmul, MatRef, Parallelism};
    use super::*;

    #[test]
    fn narrow_matmul_matches_gemm_on_every_isa() {
        let mut pad = Vec::new();
        for isa in Isa::supported() {
            for (rows, inp, t) in [
                (19, 37, 1),
                (8, 5, 16),
                (45, 384, 12),
                (3, 2, 7),
                (9, 33, 15),
                (13, 385, 16),
                (17, 40, 17),
                (7, 64, 24),
                (25, 129, 31),
                (6, 384, 32),
                (5, 11, 4),
                (5, 11, 8),
            ] {
                let w: Vec<f32> = (0..rows * inp)
                    .map(|i| ((i * 7919) % 101) as f32 * 0.01 - 0.5)
                    .collect();
                let x: Vec<f32> = (0..inp * t)
                    .map(|i| ((i * 104_729) % 89) as f32 * 0.02 - 0.9)
                    .collect();
                for accumulate in [false, true] {
                    let start: Vec<f32> = (0..rows * t).map(|i| i as f32 * 0.1).collect();
                    let mut want = start.clone();
                    matmul(
                        Isa::Portable,
                        &mut want,
                        t,
                        MatRef::rows(&w, rows, inp, inp),
                        MatRef::rows(&x, inp, t, t),
                        accumulate,
                        Parallelism::None,
                    );
                    let mut got = start.clone();
                    narrow_matmul(isa, &mut got, &w, rows, &x, t, accumulate, &mut pad);
                    for (g, w) in got.iter().zip(&want) {
                        assert!(
                            (g - w).abs() <= 1e-4 * w.abs().max(1.0),
                            "{isa} {rows}x{inp}x{t}: {g} vs {w}"
                        );
                    }
                }
            }
        }
    }
}
