//! The hot loops of the CPU encoder in [`crate::fastbert`]: matrix products through the
//! `gemm` crate, and the element-wise kernels (softmax, GELU, layer norm) written once as
//! plain, branch-free Rust and compiled three times: for AVX-512, for AVX2+FMA, and
//! portable. The widest one the CPU supports is picked at run time, so the crate still
//! builds for generic x86-64.
//!
//! This is the only module of the crate with `unsafe`: calling `gemm::gemm` (raw
//! pointers; the safe wrapper [`matmul`] checks every index it can touch first) and
//! calling `#[target_feature]` functions after checking that the CPU has the features.

#![allow(unsafe_code)]

use std::sync::OnceLock;

pub use gemm::Parallelism;

/// Instruction sets the kernels are compiled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// AVX-512 F/BW/DQ/VL with FMA.
    Avx512,
    /// AVX2 with FMA.
    Avx2,
    /// Whatever the build target allows.
    Portable,
}

/// The widest instruction set this CPU runs (checked once).
pub fn isa() -> Isa {
    static ISA: OnceLock<Isa> = OnceLock::new();
    *ISA.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            if std::env::var_os("NEURALCORE_PORTABLE_KERNELS").is_some() {
                return Isa::Portable;
            }
            if is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512dq")
                && is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("fma")
            {
                return Isa::Avx512;
            }
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                return Isa::Avx2;
            }
        }
        Isa::Portable
    })
}

/// A read-only strided matrix in a slice: element `(i, j)` is `data[i * rs + j * cs]`.
#[derive(Clone, Copy)]
pub struct MatRef<'a> {
    /// Backing storage.
    pub data: &'a [f32],
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// Row stride.
    pub rs: usize,
    /// Column stride.
    pub cs: usize,
}

impl<'a> MatRef<'a> {
    /// A row-major `rows x cols` matrix with row stride `rs`.
    pub fn rows(data: &'a [f32], rows: usize, cols: usize, rs: usize) -> Self {
        MatRef {
            data,
            rows,
            cols,
            rs,
            cs: 1,
        }
    }

    /// The transpose (no copy).
    pub fn t(self) -> Self {
        MatRef {
            data: self.data,
            rows: self.cols,
            cols: self.rows,
            rs: self.cs,
            cs: self.rs,
        }
    }
}

/// Elements spanned by a strided matrix (index of the last one + 1).
fn span(rows: usize, cols: usize, rs: usize, cs: usize) -> usize {
    if rows == 0 || cols == 0 {
        0
    } else {
        (rows - 1) * rs + (cols - 1) * cs + 1
    }
}

/// `dst = a · b` (or `dst += a · b` with `accumulate`), `dst` row-major with row stride
/// `dst_rs`. Panics if a matrix does not fit in its slice or the shapes disagree.
pub fn matmul(
    dst: &mut [f32],
    dst_rs: usize,
    a: MatRef<'_>,
    b: MatRef<'_>,
    accumulate: bool,
    par: Parallelism,
) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    assert_eq!(b.rows, k, "matmul: inner dimensions differ");
    assert!(span(m, n, dst_rs, 1) <= dst.len(), "matmul: dst too small");
    assert!(
        span(m, k, a.rs, a.cs) <= a.data.len(),
        "matmul: lhs too small"
    );
    assert!(
        span(k, n, b.rs, b.cs) <= b.data.len(),
        "matmul: rhs too small"
    );
    assert!(
        n <= dst_rs || m <= 1,
        "matmul: dst rows overlap (row stride below width)"
    );
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            for r in 0..m {
                dst[r * dst_rs..r * dst_rs + n].fill(0.0);
            }
        }
        return;
    }
    // SAFETY: the asserts above keep every element gemm reads or writes (indices up to
    // `span(..) - 1` from each base pointer, all strides non-negative) inside the
    // slices; `dst` is borrowed mutably so it aliases neither input, and its rows do
    // not overlap each other.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            dst_rs as isize,
            accumulate,
            a.data.as_ptr(),
            a.cs as isize,
            a.rs as isize,
            b.data.as_ptr(),
            b.cs as isize,
            b.rs as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            par,
        );
    }
}

/// Generates `pub fn $name(args)` that runs `$imp::<FMA>(args)` compiled for the widest
/// instruction set available.
macro_rules! multiversion {
    ($(#[$doc:meta])* $name:ident => $imp:ident ( $($arg:ident : $ty:ty),* ) $(-> $ret:ty)?) => {
        $(#[$doc])*
        pub fn $name($($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,bmi1,bmi2")]
                unsafe fn avx512($($arg: $ty),*) $(-> $ret)? {
                    $imp::<true>($($arg),*)
                }
                #[target_feature(enable = "avx2,fma,bmi1,bmi2")]
                unsafe fn avx2($($arg: $ty),*) $(-> $ret)? {
                    $imp::<true>($($arg),*)
                }
                match isa() {
                    // SAFETY: `isa()` checked that the CPU has these features.
                    Isa::Avx512 => return unsafe { avx512($($arg),*) },
                    // SAFETY: as above.
                    Isa::Avx2 => return unsafe { avx2($($arg),*) },
                    Isa::Portable => {}
                }
            }
            $imp::<false>($($arg),*)
        }
    };
}

/// `a * b + c`, fused when the instruction set has FMA.
#[inline(always)]
fn fma<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

const LANES: usize = 16;

/// `e^x` for f32 (Cephes' `expf`: range reduction by ln 2 and a degree-6 polynomial,
/// about 1 ulp), branch-free so it vectorizes. Inputs are clamped to the range where
/// the result is a normal number.
#[inline(always)]
fn exp_fast<const FMA: bool>(x: f32) -> f32 {
    let x = if x > 88.376_26 { 88.376_26 } else { x };
    exp_neg::<FMA>(x)
}

/// [`exp_fast`] without the upper clamp: for `x <= 88.37` (softmax subtracts the
/// maximum first, so its inputs are `<= 0`).
#[inline(always)]
fn exp_neg<const FMA: bool>(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23: adding it rounds to an integer
    let x = if x < -87.336_55 { -87.336_55 } else { x };
    let t = fma::<FMA>(x, std::f32::consts::LOG2_E, MAGIC);
    let n = t - MAGIC;
    let r = fma::<FMA>(n, -0.693_359_4, x);
    let r = fma::<FMA>(n, 2.121_944_4e-4, r);
    let mut p = 1.987_569_1e-4;
    p = fma::<FMA>(p, r, 1.398_199_9e-3);
    p = fma::<FMA>(p, r, 8.333_452e-3);
    p = fma::<FMA>(p, r, 4.166_579_6e-2);
    p = fma::<FMA>(p, r, 0.166_666_65);
    p = fma::<FMA>(p, r, 0.5);
    let y = fma::<FMA>(p, r * r, r) + 1.0;
    // 2^n from the integer sitting in the low mantissa bits of `t`.
    let bits = t
        .to_bits()
        .wrapping_sub(MAGIC.to_bits())
        .wrapping_add(127)
        .wrapping_shl(23);
    y * f32::from_bits(bits)
}

/// erf(x) as a ratio of two polynomials in x² on [-4, 4], saturated outside (the f32
/// form Eigen and XLA use; |error| < 1e-6).
#[inline(always)]
fn erf_fast<const FMA: bool>(x: f32) -> f32 {
    let x = if x < -4.0 { -4.0 } else { x };
    let x = if x > 4.0 { 4.0 } else { x };
    let x2 = x * x;
    let mut p = fma::<FMA>(x2, -2.726_142_3e-10, 2.770_681_4e-8);
    p = fma::<FMA>(x2, p, -2.101_024e-6);
    p = fma::<FMA>(x2, p, -5.692_506_4e-5);
    p = fma::<FMA>(x2, p, -7.349_906_3e-4);
    p = fma::<FMA>(x2, p, -2.954_6e-3);
    p = fma::<FMA>(x2, p, -1.609_603_3e-2);
    p *= x;
    let mut q = fma::<FMA>(x2, -1.456_607_2e-5, -2.133_740_6e-4);
    q = fma::<FMA>(x2, q, -1.682_827e-3);
    q = fma::<FMA>(x2, q, -7.373_329_3e-3);
    q = fma::<FMA>(x2, q, -1.426_474e-2);
    p / q
}

#[inline(always)]
fn reduce(acc: [f32; LANES]) -> f32 {
    let mut w = acc;
    let mut half = LANES / 2;
    while half > 0 {
        for i in 0..half {
            w[i] += w[i + half];
        }
        half /= 2;
    }
    w[0]
}

/// Row-wise `exp(scale · (x - max))` in place; `inv_sums[r]` gets `1 / sum` of row `r`
/// (the caller scales whatever the probabilities are multiplied into).
#[inline(always)]
fn softmax_rows_imp<const FMA: bool>(
    x: &mut [f32],
    width: usize,
    scale: f32,
    inv_sums: &mut [f32],
) {
    for (row, inv_sum) in x.chunks_exact_mut(width).zip(inv_sums.iter_mut()) {
        let mut mx = [f32::NEG_INFINITY; LANES];
        let mut chunks = row.chunks_exact(LANES);
        for c in &mut chunks {
            for i in 0..LANES {
                mx[i] = if c[i] > mx[i] { c[i] } else { mx[i] };
            }
        }
        for (i, &v) in chunks.remainder().iter().enumerate() {
            mx[i] = if v > mx[i] { v } else { mx[i] };
        }
        let mut m = mx[0];
        for &v in &mx[1..] {
            m = if v > m { v } else { m };
        }
        let shift = -m * scale;
        let mut acc = [0f32; LANES];
        let mut chunks = row.chunks_exact_mut(LANES);
        for c in &mut chunks {
            for i in 0..LANES {
                let e = exp_neg::<FMA>(fma::<FMA>(c[i], scale, shift));
                c[i] = e;
                acc[i] += e;
            }
        }
        for (i, v) in chunks.into_remainder().iter_mut().enumerate() {
            let e = exp_neg::<FMA>(fma::<FMA>(*v, scale, shift));
            *v = e;
            acc[i] += e;
        }
        *inv_sum = 1.0 / reduce(acc);
    }
}

multiversion!(
    /// Unnormalized row-wise softmax of `scale · x` over rows of `width` values, in
    /// place, with `1 / row sum` in `inv_sums`.
    softmax_rows => softmax_rows_imp(x: &mut [f32], width: usize, scale: f32, inv_sums: &mut [f32])
);

#[inline(always)]
fn scale_rows_imp<const FMA: bool>(x: &mut [f32], width: usize, factors: &[f32]) {
    for (row, &f) in x.chunks_exact_mut(width).zip(factors) {
        for v in row {
            *v *= f;
        }
    }
}

multiversion!(
    /// `x[r][j] *= factors[r]` over rows of `width` values.
    scale_rows => scale_rows_imp(x: &mut [f32], width: usize, factors: &[f32])
);

#[inline(always)]
fn add_bias_rows_imp<const FMA: bool>(x: &mut [f32], bias: &[f32]) {
    for row in x.chunks_exact_mut(bias.len()) {
        for (v, &b) in row.iter_mut().zip(bias) {
            *v += b;
        }
    }
}

multiversion!(
    /// `x[r] += bias` on every row of `bias.len()` values.
    add_bias_rows => add_bias_rows_imp(x: &mut [f32], bias: &[f32])
);

#[inline(always)]
fn bias_gelu_rows_imp<const FMA: bool>(x: &mut [f32], width: usize, bias: &[f32]) {
    for (row, &b) in x.chunks_exact_mut(width).zip(bias) {
        for v in row {
            let y = *v + b;
            *v = 0.5 * y * (1.0 + erf_fast::<FMA>(y * std::f32::consts::FRAC_1_SQRT_2));
        }
    }
}

multiversion!(
    /// `x[r][j] = gelu(x[r][j] + bias[r])` (exact-form GELU with the rational erf) over
    /// rows of `width` values.
    bias_gelu_rows => bias_gelu_rows_imp(x: &mut [f32], width: usize, bias: &[f32])
);

#[inline(always)]
fn tanh_fast<const FMA: bool>(x: f32) -> f32 {
    // tanh(x) = 1 - 2 / (e^{2x} + 1), saturating for large |x|.
    let x = if x < -10.0 { -10.0 } else { x };
    let x = if x > 10.0 { 10.0 } else { x };
    1.0 - 2.0 / (exp_fast::<FMA>(2.0 * x) + 1.0)
}

#[inline(always)]
fn bias_gelu_tanh_rows_imp<const FMA: bool>(x: &mut [f32], width: usize, bias: &[f32]) {
    const C: f32 = 0.797_884_6; // sqrt(2 / pi)
    for (row, &b) in x.chunks_exact_mut(width).zip(bias) {
        for v in row {
            let y = *v + b;
            let inner = C * fma::<FMA>(0.044_715 * y, y * y, y);
            *v = 0.5 * y * (1.0 + tanh_fast::<FMA>(inner));
        }
    }
}

multiversion!(
    /// `x[r][j] = gelu_tanh(x[r][j] + bias[r])` over rows of `width` values.
    bias_gelu_tanh_rows => bias_gelu_tanh_rows_imp(x: &mut [f32], width: usize, bias: &[f32])
);

#[inline(always)]
fn bias_relu_rows_imp<const FMA: bool>(x: &mut [f32], width: usize, bias: &[f32]) {
    for (row, &b) in x.chunks_exact_mut(width).zip(bias) {
        for v in row {
            let y = *v + b;
            *v = if y > 0.0 { y } else { 0.0 };
        }
    }
}

multiversion!(
    /// `x[r][j] = relu(x[r][j] + bias[r])` over rows of `width` values.
    bias_relu_rows => bias_relu_rows_imp(x: &mut [f32], width: usize, bias: &[f32])
);

#[inline(always)]
fn add_bias_imp<const FMA: bool>(x: &mut [f32], bias: &[f32]) {
    for (v, &b) in x.iter_mut().zip(bias) {
        *v += b;
    }
}

multiversion!(
    /// `x += bias` element-wise.
    add_bias => add_bias_imp(x: &mut [f32], bias: &[f32])
);

#[inline(always)]
fn bias_layer_norm_cols_imp<const FMA: bool>(
    x: &mut [f32],
    width: usize,
    bias: &[f32],
    gamma: &[f32],
    beta: &[f32],
    eps: f32,
    stats: &mut [f32],
) {
    let n = bias.len();
    let inv_n = 1.0 / n as f32;
    let (mean, rstd) = stats[..2 * width].split_at_mut(width);
    mean.fill(0.0);
    for (row, &b) in x.chunks_exact_mut(width).zip(bias) {
        for (v, m) in row.iter_mut().zip(mean.iter_mut()) {
            *v += b;
            *m += *v;
        }
    }
    for m in mean.iter_mut() {
        *m *= inv_n;
    }
    rstd.fill(0.0);
    for row in x.chunks_exact(width) {
        for ((&v, &m), s) in row.iter().zip(mean.iter()).zip(rstd.iter_mut()) {
            let d = v - m;
            *s = fma::<FMA>(d, d, *s);
        }
    }
    for s in rstd.iter_mut() {
        *s = 1.0 / (*s * inv_n + eps).sqrt();
    }
    for ((row, &g), &b) in x.chunks_exact_mut(width).zip(gamma).zip(beta) {
        for ((v, &m), &r) in row.iter_mut().zip(mean.iter()).zip(rstd.iter()) {
            *v = fma::<FMA>((*v - m) * r, g, b);
        }
    }
}

multiversion!(
    /// Layer norm of each column of the feature-major `[bias.len(), width]` matrix `x`:
    /// `x[:, j] = layer_norm(x[:, j] + bias) · gamma + beta`. `stats` holds at least
    /// `2 · width` values of scratch.
    bias_layer_norm_cols => bias_layer_norm_cols_imp(
        x: &mut [f32],
        width: usize,
        bias: &[f32],
        gamma: &[f32],
        beta: &[f32],
        eps: f32,
        stats: &mut [f32]
    )
);

#[inline(always)]
fn add_into_imp<const FMA: bool>(dst: &mut [f32], a: &[f32], b: &[f32]) {
    for ((d, &x), &y) in dst.iter_mut().zip(a).zip(b) {
        *d = x + y;
    }
}

multiversion!(
    /// `dst = a + b` element-wise.
    add_into => add_into_imp(dst: &mut [f32], a: &[f32], b: &[f32])
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_within_2_ulp() {
        let mut worst = 0f64;
        let mut x = -87.0f32;
        while x < 88.0 {
            let want = (x as f64).exp();
            let got = exp_fast::<false>(x) as f64;
            worst = worst.max(((got - want) / want).abs());
            x += 0.001_7;
        }
        assert!(worst < 2.5e-7, "max relative error {worst}");
    }

    #[test]
    fn softmax_matches_naive() {
        let width = 37;
        let x: Vec<f32> = (0..width * 3)
            .map(|i| ((i * 7919) % 113) as f32 * 0.37 - 20.0)
            .collect();
        let mut got = x.clone();
        let mut inv = vec![0.0; 3];
        softmax_rows(&mut got, width, 0.125, &mut inv);
        scale_rows(&mut got, width, &inv);
        for (row, g) in x.chunks(width).zip(got.chunks(width)) {
            let m = row
                .iter()
                .cloned()
                .fold(f64::MIN, |a, b| a.max(b as f64 * 0.125));
            let e: Vec<f64> = row.iter().map(|&v| (v as f64 * 0.125 - m).exp()).collect();
            let s: f64 = e.iter().sum();
            for (w, &g) in e.iter().zip(g) {
                assert!((w / s - g as f64).abs() < 1e-7, "{} vs {g}", w / s);
            }
        }
    }

    #[test]
    fn matmul_strided_and_accumulating() {
        // a: 3x2 inside a row stride of 4, b = a^T view.
        let a = [1., 2., 9., 9., 3., 4., 9., 9., 5., 6., 9., 9.];
        let am = MatRef::rows(&a, 3, 2, 4);
        let mut d = vec![1.0; 9];
        matmul(&mut d, 3, am, am.t(), true, Parallelism::None);
        assert_eq!(d, [6., 12., 18., 12., 26., 40., 18., 40., 62.]);
    }
}
