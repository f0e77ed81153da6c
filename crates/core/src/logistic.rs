//! Logistic regression: `p = σ(w · x + b)` fitted to labelled feature vectors.
//!
//! One fitter for every model the project learns (the memory reranker, the answer
//! grader's feature model): Newton's method, with a backtracking line search, on
//!
//! `Σᵢ cᵢ · logloss(yᵢ, σ(w · xᵢ + b)) + l2 / 2 · |w|²`
//!
//! where `cᵢ` is 1, or with [`FitOptions::balance_classes`] `n / (2 · count of yᵢ's
//! class)` (each class weighs half the total), and the intercept `b` is not penalised.
//! With [`FitOptions::standardize`] the features are centred and scaled to unit
//! variance while fitting (the penalty then applies to the standardised weights, and
//! fitting is well conditioned whatever the features' scales); the model returned is
//! always on the raw features' scale.

/// How to fit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FitOptions {
    /// The L2 penalty `l2 / 2 · |w|²` added to the summed (not averaged) log loss.
    pub l2: f64,
    /// Weigh each class to half the total, so a rare class counts as much as a common
    /// one.
    pub balance_classes: bool,
    /// Standardise the features while fitting.
    pub standardize: bool,
    /// Newton steps at most (it usually converges in 5–30).
    pub max_iter: usize,
}

impl Default for FitOptions {
    fn default() -> Self {
        FitOptions {
            l2: 1.0,
            balance_classes: false,
            standardize: true,
            max_iter: 100,
        }
    }
}

/// A fitted model.
#[derive(Debug, Clone, PartialEq)]
pub struct Logistic {
    /// One weight per feature.
    pub weights: Vec<f64>,
    /// The intercept.
    pub bias: f64,
}

impl Logistic {
    /// `σ(w · x + b)`.
    pub fn predict(&self, x: &[f32]) -> f64 {
        let z = self.bias
            + self
                .weights
                .iter()
                .zip(x)
                .map(|(w, x)| w * *x as f64)
                .sum::<f64>();
        sigmoid(z)
    }
}

fn sigmoid(z: f64) -> f64 {
    1.0 / (1.0 + (-z).exp())
}

/// `ln(1 + eᶻ)` without overflow.
fn softplus(z: f64) -> f64 {
    z.max(0.0) + (-z.abs()).exp().ln_1p()
}

/// Fit to `samples` (features, label). `None` when there is nothing to learn from (no
/// samples, or one label only), when the samples' lengths differ, or when the system
/// is singular (a feature constant or collinear with others while `l2` is 0).
pub fn fit<X: AsRef<[f32]>>(samples: &[(X, bool)], opts: &FitOptions) -> Option<Logistic> {
    let n = samples.len();
    let positives = samples.iter().filter(|s| s.1).count();
    if n == 0 || positives == 0 || positives == n {
        return None;
    }
    let d = samples[0].0.as_ref().len();
    if samples.iter().any(|(x, _)| x.as_ref().len() != d) {
        return None;
    }
    // Centre and scale (or not).
    let mut mean = vec![0f64; d];
    let mut scale = vec![1f64; d];
    if opts.standardize {
        let mut var = vec![0f64; d];
        for (x, _) in samples {
            for (m, v) in mean.iter_mut().zip(x.as_ref()) {
                *m += *v as f64 / n as f64;
            }
        }
        for (x, _) in samples {
            for ((s, m), v) in var.iter_mut().zip(&mean).zip(x.as_ref()) {
                *s += (*v as f64 - m).powi(2) / n as f64;
            }
        }
        for (s, v) in scale.iter_mut().zip(var) {
            *s = if v > 1e-12 { v.sqrt() } else { 1.0 };
        }
    }
    let (wp, wn) = if opts.balance_classes {
        let nf = n as f64;
        (
            nf / (2.0 * positives as f64),
            nf / (2.0 * (n - positives) as f64),
        )
    } else {
        (1.0, 1.0)
    };
    // Rows: the standardised features, then 1 for the intercept; with label and weight.
    let p = d + 1;
    let rows: Vec<(Vec<f64>, f64, f64)> = samples
        .iter()
        .map(|(x, y)| {
            let mut r: Vec<f64> = x
                .as_ref()
                .iter()
                .zip(mean.iter().zip(&scale))
                .map(|(v, (m, s))| (*v as f64 - m) / s)
                .collect();
            r.push(1.0);
            let (t, c) = if *y { (1.0, wp) } else { (0.0, wn) };
            (r, t, c)
        })
        .collect();
    let eta = |beta: &[f64], r: &[f64]| -> f64 { r.iter().zip(beta).map(|(a, b)| a * b).sum() };
    let objective = |beta: &[f64]| -> f64 {
        let loss: f64 = rows
            .iter()
            .map(|(r, t, c)| {
                let z = eta(beta, r);
                c * if *t > 0.5 { softplus(-z) } else { softplus(z) }
            })
            .sum();
        loss + 0.5 * opts.l2 * beta[..d].iter().map(|b| b * b).sum::<f64>()
    };
    let mut beta = vec![0f64; p];
    let mut current = objective(&beta);
    for _ in 0..opts.max_iter {
        let mut grad = vec![0f64; p];
        let mut hess = vec![vec![0f64; p]; p];
        for (r, t, c) in &rows {
            let q = sigmoid(eta(&beta, r));
            let g = c * (q - t);
            let w = c * (q * (1.0 - q)).max(1e-12);
            for a in 0..p {
                grad[a] += g * r[a];
                for b in a..p {
                    hess[a][b] += w * r[a] * r[b];
                }
            }
        }
        // Mirror the upper triangle.
        for a in 1..p {
            let (upper, rest) = hess.split_at_mut(a);
            for (b, row) in upper.iter().enumerate() {
                rest[0][b] = row[a];
            }
        }
        for a in 0..d {
            grad[a] += opts.l2 * beta[a];
            hess[a][a] += opts.l2;
        }
        let step = solve(hess, grad.clone())?;
        // Backtrack until the objective falls enough (Armijo); a full step is the
        // Newton step.
        let slope: f64 = grad.iter().zip(&step).map(|(g, s)| g * s).sum();
        let mut t = 1.0;
        let (next, value) = loop {
            let cand: Vec<f64> = beta.iter().zip(&step).map(|(b, s)| b - t * s).collect();
            let v = objective(&cand);
            if v <= current - 1e-4 * t * slope || t < 1e-10 {
                break (cand, v);
            }
            t *= 0.5;
        };
        let moved = step.iter().map(|s| (t * s).abs()).fold(0.0, f64::max);
        let improved = current - value;
        beta = next;
        current = value;
        if moved < 1e-9 || improved.abs() <= 1e-14 * current.abs().max(1.0) {
            break;
        }
    }
    if beta.iter().any(|b| !b.is_finite()) {
        return None;
    }
    // Back to the raw features' scale.
    let mut bias = beta[d];
    let weights = (0..d)
        .map(|j| {
            bias -= beta[j] * mean[j] / scale[j];
            beta[j] / scale[j]
        })
        .collect();
    Some(Logistic { weights, bias })
}

/// Solve `a x = b` by Gaussian elimination with partial pivoting (`None`: singular).
fn solve(mut a: Vec<Vec<f64>>, mut b: Vec<f64>) -> Option<Vec<f64>> {
    let p = b.len();
    for col in 0..p {
        let pivot = (col..p).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[pivot][col].abs() < 1e-12 {
            return None;
        }
        a.swap(col, pivot);
        b.swap(col, pivot);
        for row in col + 1..p {
            let f = a[row][col] / a[col][col];
            let (upper, lower) = a.split_at_mut(row);
            for (x, v) in lower[0][col..].iter_mut().zip(&upper[col][col..]) {
                *x -= f * v;
            }
            b[row] -= f * b[col];
        }
    }
    let mut x = vec![0f64; p];
    for row in (0..p).rev() {
        let s: f64 = (row + 1..p).map(|k| a[row][k] * x[k]).sum();
        x[row] = (b[row] - s) / a[row][row];
    }
    Some(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic generator of numbers in [0, 1).
    fn uniform(seed: u64) -> impl FnMut() -> f32 {
        let mut s = seed;
        move || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 33) as f32 / (1u64 << 31) as f32
        }
    }

    /// The objective's gradient at a model on the raw scale (no standardising).
    fn gradient(samples: &[(Vec<f32>, bool)], m: &Logistic, l2: f64, c: (f64, f64)) -> Vec<f64> {
        let d = m.weights.len();
        let mut g = vec![0f64; d + 1];
        for (x, y) in samples {
            let p = m.predict(x);
            let (t, w) = if *y { (1.0, c.0) } else { (0.0, c.1) };
            for (gj, xj) in g.iter_mut().zip(x) {
                *gj += w * (p - t) * *xj as f64;
            }
            g[d] += w * (p - t);
        }
        for (gj, wj) in g.iter_mut().zip(&m.weights) {
            *gj += l2 * wj;
        }
        g
    }

    #[test]
    fn solve_recovers_a_known_solution() {
        let a = vec![
            vec![2.0, 1.0, 0.0],
            vec![1.0, 3.0, 1.0],
            vec![0.0, 1.0, 4.0],
        ];
        let x = [1.0, -2.0, 0.5];
        let b = vec![
            2.0 * x[0] + x[1],
            x[0] + 3.0 * x[1] + x[2],
            x[1] + 4.0 * x[2],
        ];
        let got = solve(a, b).unwrap();
        for (g, w) in got.iter().zip(x) {
            assert!((g - w).abs() < 1e-9, "{got:?}");
        }
        assert!(solve(vec![vec![1.0, 2.0], vec![2.0, 4.0]], vec![1.0, 2.0]).is_none());
    }

    #[test]
    fn learns_which_feature_predicts_the_label() {
        // The label follows feature 0 with noise; feature 1 is noise; feature 2 sits far
        // from 0, to exercise the intercept.
        let mut next = uniform(7);
        let samples: Vec<(Vec<f32>, bool)> = (0..2000)
            .map(|i| {
                let x = vec![next(), next(), 3.0 + next()];
                let y = x[0] + 0.3 * (next() - 0.5) > 0.6 || i % 97 == 0;
                (x, y)
            })
            .collect();
        let m = fit(&samples, &FitOptions::default()).unwrap();
        assert!(m.weights[0] > 5.0, "{m:?}");
        assert!(m.weights[1].abs() < 1.0, "{m:?}");
        assert!(m.predict(&[0.9, 0.5, 3.5]) > 0.8 && m.predict(&[0.1, 0.5, 3.5]) < 0.2);
    }

    #[test]
    fn reaches_the_optimum_of_the_penalised_loss() {
        // Without standardising, the gradient of the raw objective is 0 at the optimum,
        // with and without class weights.
        let mut next = uniform(11);
        let samples: Vec<(Vec<f32>, bool)> = (0..500)
            .map(|_| {
                let x = vec![next(), next(), next()];
                let y = 2.0 * x[0] - x[2] + 0.8 * (next() - 0.5) > 0.7;
                (x, y)
            })
            .collect();
        let pos = samples.iter().filter(|s| s.1).count() as f64;
        let n = samples.len() as f64;
        for balance in [false, true] {
            let opts = FitOptions {
                l2: 0.5,
                balance_classes: balance,
                standardize: false,
                max_iter: 100,
            };
            let m = fit(&samples, &opts).unwrap();
            let c = if balance {
                (n / (2.0 * pos), n / (2.0 * (n - pos)))
            } else {
                (1.0, 1.0)
            };
            let g = gradient(&samples, &m, opts.l2, c);
            assert!(g.iter().all(|g| g.abs() < 1e-6), "{balance}: {g:?}");
        }
    }

    #[test]
    fn class_balancing_lifts_a_rare_class() {
        // 5% positives, weakly separated: unbalanced, most positives score below 0.5;
        // balanced, the average positive scores above it.
        let mut next = uniform(3);
        let samples: Vec<(Vec<f32>, bool)> = (0..2000)
            .map(|i| {
                let y = i % 20 == 0;
                let x = vec![next() + if y { 0.4 } else { 0.0 }];
                (x, y)
            })
            .collect();
        let mean_pos = |m: &Logistic| {
            let p: Vec<f64> = samples
                .iter()
                .filter(|s| s.1)
                .map(|s| m.predict(&s.0))
                .collect();
            p.iter().sum::<f64>() / p.len() as f64
        };
        let plain = fit(&samples, &FitOptions::default()).unwrap();
        let balanced = fit(
            &samples,
            &FitOptions {
                balance_classes: true,
                ..FitOptions::default()
            },
        )
        .unwrap();
        assert!(mean_pos(&plain) < 0.3, "{plain:?}");
        assert!(mean_pos(&balanced) > 0.5, "{balanced:?}");
    }

    #[test]
    fn separable_data_stays_finite_with_a_penalty() {
        let samples: Vec<([f32; 2], bool)> = (0..200)
            .map(|i| {
                let x = (i % 100) as f32 / 100.0;
                ([x, 1.0], x > 0.5)
            })
            .collect();
        // The second feature is constant: collinear with the intercept, kept solvable
        // by the penalty.
        let opts = FitOptions {
            l2: 0.2,
            standardize: false,
            ..FitOptions::default()
        };
        let m = fit(&samples, &opts).unwrap();
        assert!(m.weights.iter().all(|w| w.is_finite()), "{m:?}");
        assert!(m.predict(&[0.9, 1.0]) > 0.95 && m.predict(&[0.1, 1.0]) < 0.05);
        // Without one it is singular.
        let none = FitOptions { l2: 0.0, ..opts };
        assert!(fit(&samples, &none).is_none());
    }

    #[test]
    fn nothing_to_learn_from() {
        let none: &[([f32; 1], bool)] = &[];
        assert!(fit(none, &FitOptions::default()).is_none());
        assert!(fit(&[([0.0f32], true), ([1.0], true)], &FitOptions::default()).is_none());
        let ragged = [(vec![0.0f32], true), (vec![1.0, 2.0], false)];
        assert!(fit(&ragged, &FitOptions::default()).is_none());
        // No features: the intercept alone, the log odds of the labels.
        let m = fit(
            &[([0f32; 0], true), ([], false), ([], false), ([], false)],
            &FitOptions::default(),
        )
        .unwrap();
        assert!((m.bias - (1.0f64 / 3.0).ln()).abs() < 1e-9, "{m:?}");
    }
}
