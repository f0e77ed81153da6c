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

#[inline(always)]
fn mul_assign_imp<const FMA: bool>(x: &mut [f32], f: &[f32]) {
    for (v, &f) in x.iter_mut().zip(f) {
        *v *= f;
    }
}

multiversion!(
    /// `x[i] *= f[i]` element-wise.
    mul_assign => mul_assign_imp(x: &mut [f32], f: &[f32])
);

#[inline(always)]
fn add_row_bias_imp<const FMA: bool>(x: &mut [f32], width: usize, bias: &[f32]) {
    for (row, &b) in x.chunks_exact_mut(width).zip(bias) {
        for v in row {
            *v += b;
        }
    }
}

multiversion!(
    /// `x[r][j] += bias[r]` over rows of `width` values.
    add_row_bias => add_row_bias_imp(x: &mut [f32], width: usize, bias: &[f32])
);

/// 16 lanes, as plain arrays: inside the `#[target_feature]` kernels below LLVM keeps
/// each one in a single AVX-512 register (no `std::arch` intrinsics, which need a newer
/// Rust than the workspace's minimum).
type F16 = [f32; 16];

/// # Safety
/// `p .. p + 16` must be readable.
#[inline(always)]
unsafe fn ld(p: *const f32) -> F16 {
    std::ptr::read_unaligned(p.cast::<F16>())
}

/// # Safety
/// `p .. p + 16` must be writable.
#[inline(always)]
unsafe fn st(p: *mut f32, v: F16) {
    std::ptr::write_unaligned(p.cast::<F16>(), v)
}

/// `a · b + c` lane by lane (FMA).
#[inline(always)]
fn vfma(a: F16, b: F16, mut c: F16) -> F16 {
    for l in 0..16 {
        c[l] = a[l].mul_add(b[l], c[l]);
    }
    c
}

/// Most tokens [`narrow_matmul`] takes: one vector of lanes.
pub const NARROW_MAX: usize = 16;

/// One feature of a narrow product's activations, padded to [`NARROW_MAX`] tokens.
pub type Padded = [f32; NARROW_MAX];

/// Rows of the weight matrix per block of [`narrow_matmul`].
const NARROW_ROWS: usize = 4;
/// Partial sums per row of [`narrow_matmul`] (by `k` mod this): with the rows, eight
/// independent accumulators hide the FMA latency.
const NARROW_K: usize = 2;

multiversion!(
    /// `dst = w · x` (`+=` with `accumulate`) for a row-major `[rows, inp]` weight `w`
    /// and feature-major `[inp, t]` activations `x` of at most [`NARROW_MAX`] tokens;
    /// `dst` is `[rows, t]`. A short query is a matrix this narrow: the weights are
    /// streamed once, straight from where they are, with the activations (padded in
    /// `pad`) held in cache, where a general product would first pack the weights.
    /// Panics if `t` is 0 or over [`NARROW_MAX`] or a slice is short.
    narrow_matmul => narrow_matmul_imp(
        dst: &mut [f32],
        w: &[f32],
        rows: usize,
        x: &[f32],
        t: usize,
        accumulate: bool,
        pad: &mut Vec<Padded>
    )
);

#[inline(always)]
fn narrow_matmul_imp<const FMA: bool>(
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
    narrow_lanes::<FMA, NARROW_MAX>(dst, w, rows, &pad[..inp], t, accumulate);
}

/// [`narrow_matmul`] over the first `L` lanes of each padded feature.
///
/// Keep this shape (the lane count a const generic, one helper per FMA row): LLVM
/// vectorizes it to one AVX-512 FMA per weight, while the same loops with the lanes
/// written as a literal 16 compiled to code 15× slower (`nc-bench memory`'s
/// `embed_query_p50_ms` went from 3.8 to 64 ms). Measure that after any change here.
#[inline(always)]
fn narrow_lanes<const FMA: bool, const L: usize>(
    dst: &mut [f32],
    w: &[f32],
    rows: usize,
    xp: &[Padded],
    t: usize,
    accumulate: bool,
) {
    let inp = xp.len();
    let ku = inp / NARROW_K * NARROW_K;
    let blocks = rows / NARROW_ROWS;
    for b in 0..blocks {
        let r0 = b * NARROW_ROWS;
        let ws: [&[f32]; NARROW_ROWS] =
            std::array::from_fn(|j| &w[(r0 + j) * inp..(r0 + j) * inp + ku]);
        let mut acc = [[[0f32; L]; NARROW_K]; NARROW_ROWS];
        for (c, xk) in xp[..ku].chunks_exact(NARROW_K).enumerate() {
            let k = c * NARROW_K;
            for j in 0..NARROW_ROWS {
                let wk = &ws[j][k..k + NARROW_K];
                for i in 0..NARROW_K {
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
    for r in blocks * NARROW_ROWS..rows {
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

/// Scratch of [`attention`]: keys and values of one head, and transposed scores.
#[derive(Default)]
pub struct AttnScratch {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    st: Vec<f32>,
}

/// The first `n` values of a scratch buffer, reallocated (zeroed) when it is shorter.
pub(crate) fn grow(v: &mut Vec<f32>, n: usize) -> &mut [f32] {
    if v.len() < n {
        *v = vec![0.0; n];
    }
    &mut v[..n]
}

/// Queries per block of the fused attention kernel (two vectors).
const ATT_Q: usize = 32;
/// Keys per block of its QKᵀ step.
const ATT_K: usize = 12;
/// Head dimensions per block of its ·V step.
const ATT_D: usize = 8;
/// Longest sequence the fused attention kernel takes.
const ATT_MAX_N: usize = 512;

/// Fused scaled dot-product attention of one head over one sequence of `n` tokens, all
/// matrices feature-major: element (token `i`, dimension `d`) of the queries is
/// `q[d * rs + i]` (likewise `k`, `v`), and the output goes to `out[d * out_rs + i]`:
/// `out[:, i] = softmax(scale · q[:, i]ᵀ k) · vᵀ`. Blocks of 32 queries go through QKᵀ,
/// softmax and ·V while their scores stay in L1, with no `gemm` call.
///
/// Runs only with AVX-512, `head_dim` a multiple of 8 and `n <= 512`; returns `false`
/// (and does nothing) otherwise, so the caller can fall back to `gemm` + [`softmax_rows`].
#[allow(clippy::too_many_arguments)]
pub fn attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    rs: usize,
    n: usize,
    head_dim: usize,
    scale: f32,
    out: &mut [f32],
    out_rs: usize,
    scratch: &mut AttnScratch,
) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        if isa() != Isa::Avx512 || head_dim == 0 || !head_dim.is_multiple_of(ATT_D) || n > ATT_MAX_N
        {
            return false;
        }
        if n == 0 {
            return true;
        }
        let in_span = span(head_dim, n, rs, 1);
        assert!(rs >= n && out_rs >= n, "attention: rows overlap");
        assert!(
            q.len() >= in_span && k.len() >= in_span && v.len() >= in_span,
            "attention: q/k/v too small"
        );
        assert!(
            out.len() >= span(head_dim, n, out_rs, 1),
            "attention: out too small"
        );
        let sr = if n <= 128 {
            128
        } else if n <= 256 {
            256
        } else {
            ATT_MAX_N
        } + ATT_Q;
        let a = attn512::Args {
            q,
            k,
            v,
            rs,
            n,
            hd: head_dim,
            scale,
            out,
            out_rs,
            qp: grow(&mut scratch.q, head_dim * sr),
            kp: grow(&mut scratch.k, head_dim * sr),
            vp: grow(&mut scratch.v, head_dim * sr),
            st: grow(&mut scratch.st, (sr + ATT_K) * ATT_Q),
        };
        // SAFETY: `isa()` checked for AVX-512. The asserts above bound the reads of
        // q/k/v and the writes to `out` (slice-indexed in the kernel); the packed rows
        // have `sr >= n + ATT_Q` columns (query blocks read up to `n + 31`, key blocks
        // up to `n + 11`), and the transposed scores `sr + ATT_K` rows of `ATT_Q`.
        unsafe {
            use attn512::head;
            match n {
                0..=128 => head::<{ 128 + ATT_Q }>(a),
                129..=256 => head::<{ 256 + ATT_Q }>(a),
                _ => head::<{ ATT_MAX_N + ATT_Q }>(a),
            }
        }
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (q, k, v, rs, n, head_dim, scale, out, out_rs, scratch);
        false
    }
}

#[cfg(target_arch = "x86_64")]
mod attn512 {
    use super::{ld, st, vfma, ATT_D, ATT_K, ATT_Q};

    /// `2^x` for `x <= 0` (clamped at -126): split into integer `n` and `f` in
    /// [-0.5, 0.5], degree-6 Taylor polynomial of `e^(f ln 2)` (truncation < 1.2e-7
    /// relative), times `2^n` from the exponent bits. FMA.
    #[inline(always)]
    fn exp2_neg(x: f32) -> f32 {
        const MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23: adding it rounds to an integer
        let x = if x < -126.0 { -126.0 } else { x };
        let t = x + MAGIC;
        let f = x - (t - MAGIC);
        let mut p: f32 = 1.540_353e-4;
        p = p.mul_add(f, 1.333_355_8e-3);
        p = p.mul_add(f, 9.618_129e-3);
        p = p.mul_add(f, 5.550_411e-2);
        p = p.mul_add(f, 0.240_226_5);
        p = p.mul_add(f, std::f32::consts::LN_2);
        let y = p.mul_add(f, 1.0);
        let bits = t
            .to_bits()
            .wrapping_sub(MAGIC.to_bits())
            .wrapping_add(127)
            .wrapping_shl(23);
        y * f32::from_bits(bits)
    }

    pub(super) struct Args<'a> {
        pub q: &'a [f32],
        pub k: &'a [f32],
        pub v: &'a [f32],
        pub rs: usize,
        pub n: usize,
        pub hd: usize,
        pub scale: f32,
        pub out: &'a mut [f32],
        pub out_rs: usize,
        pub qp: &'a mut [f32],
        pub kp: &'a mut [f32],
        pub vp: &'a mut [f32],
        pub st: &'a mut [f32],
    }

    /// See [`super::attention`]; `SR` is the row stride of the packed queries, keys and
    /// values.
    ///
    /// # Safety
    /// The CPU must have AVX-512F, and `a` must satisfy the bounds that
    /// [`super::attention`] asserts, with `a.n + ATT_Q <= SR`, `qp`, `kp`, `vp` of
    /// `hd · SR` and `st` of `(SR + ATT_K) · ATT_Q` values.
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,bmi1,bmi2")]
    pub(super) unsafe fn head<const SR: usize>(a: Args<'_>) {
        let (n, hd, rs) = (a.n, a.hd, a.rs);
        // This head's rows copied to a constant stride; queries past `n` are zero.
        for d in 0..hd {
            let src = d * rs..d * rs + n;
            let dst = d * SR..d * SR + n;
            a.qp[dst.clone()].copy_from_slice(&a.q[src.clone()]);
            a.qp[d * SR + n..d * SR + n + ATT_Q].fill(0.0);
            a.kp[dst.clone()].copy_from_slice(&a.k[src.clone()]);
            a.vp[dst].copy_from_slice(&a.v[src]);
        }
        let (qp, kp, vp) = (a.qp.as_ptr(), a.kp.as_ptr(), a.vp.as_ptr());
        let stp = a.st.as_mut_ptr();
        let mut ib = 0;
        while ib < n {
            let mut mx = [[f32::NEG_INFINITY; 16]; 2];
            // Transposed scores: `st[j * 32 + i]` for key `j`, query `ib + i`.
            let mut jb = 0;
            while jb < n {
                let mut acc = [[[0f32; 16]; 2]; ATT_K];
                for d in 0..hd {
                    let qr = qp.add(d * SR + ib);
                    let (q0, q1) = (ld(qr), ld(qr.add(16)));
                    let kr = kp.add(d * SR + jb);
                    for (r, acc) in acc.iter_mut().enumerate() {
                        let kb = [*kr.add(r); 16];
                        acc[0] = vfma(kb, q0, acc[0]);
                        acc[1] = vfma(kb, q1, acc[1]);
                    }
                }
                for (r, acc) in acc.iter().enumerate() {
                    let dst = stp.add((jb + r) * ATT_Q);
                    st(dst, acc[0]);
                    st(dst.add(16), acc[1]);
                    if jb + r < n {
                        for (m, x) in mx.iter_mut().zip(acc) {
                            for l in 0..16 {
                                m[l] = if x[l] > m[l] { x[l] } else { m[l] };
                            }
                        }
                    }
                }
                jb += ATT_K;
            }
            // Softmax over keys, per query lane (max taken above): exp and sum in place,
            // as 2^(log2(e) · scale · (x - max)).
            let l2 = a.scale * std::f32::consts::LOG2_E;
            let shift = mx.map(|m| m.map(|m| -m * l2));
            let mut sum = [[0f32; 16]; 2];
            for j in 0..n {
                for c in 0..2 {
                    let p = stp.add(j * ATT_Q + 16 * c);
                    let mut x = ld(p);
                    for l in 0..16 {
                        x[l] = exp2_neg(x[l].mul_add(l2, shift[c][l]));
                        sum[c][l] += x[l];
                    }
                    st(p, x);
                }
            }
            let inv = sum.map(|s| s.map(|s| 1.0 / s));
            // out[d, ib..] = Σ_j v[d, j] · p[j, ..] / sum, `ATT_D` dimensions at a time.
            let stq = stp as *const f32;
            let valid = (n - ib).min(ATT_Q);
            let mut d0 = 0;
            while d0 < hd {
                let mut acc = [[[0f32; 16]; 2]; ATT_D];
                let vb = vp.add(d0 * SR);
                for j in 0..n {
                    let p0 = ld(stq.add(j * ATT_Q));
                    let p1 = ld(stq.add(j * ATT_Q + 16));
                    for (r, acc) in acc.iter_mut().enumerate() {
                        let vv = [*vb.add(r * SR + j); 16];
                        acc[0] = vfma(vv, p0, acc[0]);
                        acc[1] = vfma(vv, p1, acc[1]);
                    }
                }
                for (r, acc) in acc.iter().enumerate() {
                    let mut res = [0f32; ATT_Q];
                    for c in 0..2 {
                        let mut x = acc[c];
                        for l in 0..16 {
                            x[l] *= inv[c][l];
                        }
                        st(res.as_mut_ptr().add(16 * c), x);
                    }
                    let o = (d0 + r) * a.out_rs + ib;
                    a.out[o..o + valid].copy_from_slice(&res[..valid]);
                }
                d0 += ATT_D;
            }
            ib += ATT_Q;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrow_matmul_matches_gemm() {
        let mut pad = Vec::new();
        for (rows, inp, t) in [
            (19, 37, 1),
            (8, 5, 16),
            (45, 384, 12),
            (3, 2, 7),
            (9, 33, 15),
            (13, 385, 16),
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
                    &mut want,
                    t,
                    MatRef::rows(&w, rows, inp, inp),
                    MatRef::rows(&x, inp, t, t),
                    accumulate,
                    Parallelism::None,
                );
                let mut got = start.clone();
                narrow_matmul(&mut got, &w, rows, &x, t, accumulate, &mut pad);
                for (g, w) in got.iter().zip(&want) {
                    assert!((g - w).abs() <= 1e-4 * w.abs().max(1.0), "{g} vs {w}");
                }
            }
        }
    }

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
        for (row, &f) in got.chunks_mut(width).zip(&inv) {
            row.iter_mut().for_each(|v| *v *= f);
        }
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
        let at = MatRef {
            data: &a,
            rows: 2,
            cols: 3,
            rs: 1,
            cs: 4,
        };
        matmul(&mut d, 3, am, at, true, Parallelism::None);
        assert_eq!(d, [6., 12., 18., 12., 26., 40., 18., 40., 62.]);
    }
    #[test]
    fn fused_attention_matches_naive() {
        let mut scratch = AttnScratch::default();
        for hd in [8, 32, 64] {
            for n in [1usize, 5, 16, 17, 33, 64, 100, 129, 300] {
                let rs = n + 7;
                let x: Vec<f32> = (0..3 * hd * rs)
                    .map(|i| ((i * 7919 + 13) % 211) as f32 * 0.023 - 2.4)
                    .collect();
                let (q, k, v) = (&x[..], &x[hd * rs..], &x[2 * hd * rs..]);
                let scale = 1.0 / (hd as f32).sqrt();
                let out_rs = n + 3;
                let mut out = vec![f32::NAN; hd * out_rs];
                if !attention(q, k, v, rs, n, hd, scale, &mut out, out_rs, &mut scratch) {
                    return; // no AVX-512 here
                }
                for i in 0..n {
                    let sc: Vec<f64> = (0..n)
                        .map(|j| {
                            (0..hd)
                                .map(|d| q[d * rs + i] as f64 * k[d * rs + j] as f64)
                                .sum::<f64>()
                                * scale as f64
                        })
                        .collect();
                    let m = sc.iter().cloned().fold(f64::MIN, f64::max);
                    let e: Vec<f64> = sc.iter().map(|s| (s - m).exp()).collect();
                    let sum: f64 = e.iter().sum();
                    for d in 0..hd {
                        let want: f64 =
                            (0..n).map(|j| e[j] * v[d * rs + j] as f64).sum::<f64>() / sum;
                        let got = out[d * out_rs + i] as f64;
                        assert!(
                            (want - got).abs() < 1e-5,
                            "hd {hd} n {n} ({i}, {d}): {want} vs {got}"
                        );
                    }
                }
            }
        }
    }
}
