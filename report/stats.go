package report

import (
	"math"
)

// This file is the statistics the report needs, written out so that no stats
// library is pulled in: Student's t distribution (CDF through the regularized
// incomplete beta function, quantile by bisection on the CDF), Welch's t-test, a
// seeded permutation test, the unbiased pass@k estimator and a sample-size
// calculation.

// Alpha is the significance level of every verdict; Power is the power the
// sample-size calculation aims for.
const (
	Alpha = 0.05
	Power = 0.8
)

// Resamples is how many random relabellings the permutation test draws.
const Resamples = 10000

// MinWelch is the number of rewarded episodes each arm needs for Welch's t-test;
// below it the permutation test gives the p-value, since the t approximation to the
// mean of a few (often binary) rewards is poor.
const MinWelch = 30

// meanVar returns the mean and the unbiased sample variance (0 for fewer than two
// values).
func meanVar(x []float64) (mean, variance float64) {
	if len(x) == 0 {
		return 0, 0
	}
	for _, v := range x {
		mean += v
	}
	mean /= float64(len(x))
	if len(x) < 2 {
		return mean, 0
	}
	for _, v := range x {
		d := v - mean
		variance += d * d
	}
	return mean, variance / float64(len(x)-1)
}

// RegIncBeta is the regularized incomplete beta function I_x(a, b), by the
// continued fraction of Numerical Recipes (§6.4), evaluated with the modified Lentz
// method on whichever side converges fast.
func RegIncBeta(x, a, b float64) float64 {
	switch {
	case math.IsNaN(x) || a <= 0 || b <= 0:
		return math.NaN()
	case x <= 0:
		return 0
	case x >= 1:
		return 1
	}
	la, _ := math.Lgamma(a)
	lb, _ := math.Lgamma(b)
	lab, _ := math.Lgamma(a + b)
	front := math.Exp(lab - la - lb + a*math.Log(x) + b*math.Log1p(-x))
	if x < (a+1)/(a+b+2) {
		return front * betaCF(x, a, b) / a
	}
	return 1 - front*betaCF(1-x, b, a)/b
}

// betaCF evaluates the continued fraction of the incomplete beta function.
func betaCF(x, a, b float64) float64 {
	const (
		maxIter = 10000
		eps     = 1e-15
		tiny    = 1e-300
	)
	qab, qap, qam := a+b, a+1, a-1
	c, d := 1.0, 1-qab*x/qap
	if math.Abs(d) < tiny {
		d = tiny
	}
	d = 1 / d
	h := d
	for m := 1; m <= maxIter; m++ {
		fm := float64(m)
		m2 := 2 * fm
		aa := fm * (b - fm) * x / ((qam + m2) * (a + m2))
		d = 1 + aa*d
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = 1 + aa/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		h *= d * c
		aa = -(a + fm) * (qab + fm) * x / ((a + m2) * (qap + m2))
		d = 1 + aa*d
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = 1 + aa/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		del := d * c
		h *= del
		if math.Abs(del-1) < eps {
			break
		}
	}
	return h
}

// TCDF is P(T ≤ t) for Student's t distribution with df degrees of freedom
// (df > 0, not necessarily whole).
func TCDF(t, df float64) float64 {
	if math.IsNaN(t) || math.IsNaN(df) || df <= 0 {
		return math.NaN()
	}
	if math.IsInf(t, 0) {
		if t > 0 {
			return 1
		}
		return 0
	}
	tail := 0.5 * RegIncBeta(df/(df+t*t), df/2, 0.5) // P(T > |t|)
	if t > 0 {
		return 1 - tail
	}
	return tail
}

// TTwoSided is the two-sided p-value P(|T| ≥ |t|) with df degrees of freedom. It is
// computed from the tail directly, so that small p-values keep their precision.
func TTwoSided(t, df float64) float64 {
	if math.IsNaN(t) || math.IsNaN(df) || df <= 0 {
		return math.NaN()
	}
	if math.IsInf(t, 0) {
		return 0
	}
	return RegIncBeta(df/(df+t*t), df/2, 0.5)
}

// TQuantile is the p-quantile of Student's t distribution with df degrees of
// freedom: the t with TCDF(t, df) = p. It bisects the CDF, which is monotone, to
// full float64 precision; 0 < p < 1.
func TQuantile(p, df float64) float64 {
	if math.IsNaN(p) || p <= 0 || p >= 1 || math.IsNaN(df) || df <= 0 {
		return math.NaN()
	}
	if p == 0.5 {
		return 0
	}
	if p < 0.5 {
		return -TQuantile(1-p, df)
	}
	lo, hi := 0.0, 1.0
	for TCDF(hi, df) < p {
		lo, hi = hi, 2*hi
		if math.IsInf(hi, 0) {
			return math.Inf(1)
		}
	}
	for range 200 {
		mid := lo + (hi-lo)/2
		if mid <= lo || mid >= hi {
			break
		}
		if TCDF(mid, df) < p {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo + (hi-lo)/2
}

// NormalQuantile is the p-quantile of the standard normal distribution.
func NormalQuantile(p float64) float64 {
	return math.Sqrt2 * math.Erfinv(2*p-1)
}

// Welch is the result of Welch's unequal-variances t-test of mean(x) − mean(y).
type Welch struct {
	T, DF, P float64
}

// WelchTest compares the means of x and y with Welch's t-test: the statistic
// (x̄ − ȳ) / √(s²ₓ/nₓ + s²ᵧ/nᵧ), the Welch–Satterthwaite degrees of freedom, and the
// two-sided p-value. Each sample needs two values. When both variances are zero
// the statistic is infinite (p = 0) if the means differ, else 0 (p = 1).
func WelchTest(x, y []float64) Welch {
	if len(x) < 2 || len(y) < 2 {
		return Welch{T: math.NaN(), DF: math.NaN(), P: math.NaN()}
	}
	mx, vx := meanVar(x)
	my, vy := meanVar(y)
	nx, ny := float64(len(x)), float64(len(y))
	a, b := vx/nx, vy/ny
	se := math.Sqrt(a + b)
	diff := mx - my
	df := nx + ny - 2
	if se == 0 {
		if diff == 0 {
			return Welch{T: 0, DF: df, P: 1}
		}
		return Welch{T: math.Copysign(math.Inf(1), diff), DF: df, P: 0}
	}
	df = (a + b) * (a + b) / (a*a/(nx-1) + b*b/(ny-1))
	t := diff / se
	return Welch{T: t, DF: df, P: TTwoSided(t, df)}
}

// liftCI is Welch's 95% interval of lift = mean(x) − mean(y): lift ± t(0.975, df)·se
// with se = √(s²ₓ/nₓ + s²ᵧ/nᵧ) and the Welch–Satterthwaite df; [lift, lift] when both
// variances are zero; nil unless each sample has two values.
func liftCI(lift float64, x, y []float64) *[2]float64 {
	if len(x) < 2 || len(y) < 2 {
		return nil
	}
	_, vx := meanVar(x)
	_, vy := meanVar(y)
	a, b := vx/float64(len(x)), vy/float64(len(y))
	se := math.Sqrt(a + b)
	if se == 0 {
		return &[2]float64{lift, lift}
	}
	df := (a + b) * (a + b) / (a*a/float64(len(x)-1) + b*b/float64(len(y)-1))
	half := TQuantile(0.975, df) * se
	return &[2]float64{lift - half, lift + half}
}

// rng is splitmix64: tiny, fast, and fixed forever, so that a permutation test is
// reproducible on every Go version and platform (math/rand/v2 does not promise its
// bounded draws stay the same).
type rng struct{ s uint64 }

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// below returns a uniform integer in [0, n), n > 0, by rejection (no modulo bias).
func (r *rng) below(n uint64) uint64 {
	limit := -n % n // 2^64 mod n: draws under it would favour small results
	for {
		v := r.next()
		if v >= limit {
			return v % n
		}
	}
}

// PermutationSeed is the seed of every permutation test: reports are reproducible.
const PermutationSeed = 0x63616d70726f7879 // "camproxy"

// PermutationTest is the two-sided p-value of mean(x) − mean(y) under random
// relabelling of the pooled values: resamples random splits of the pool into groups
// of len(x) and len(y), and p = (1 + #{|diff| ≥ |observed|}) / (1 + resamples), the
// estimate that never reports an impossible 0. The generator is seeded with seed,
// so the same data give the same p. Each sample needs one value.
func PermutationTest(x, y []float64, resamples int, seed uint64) float64 {
	if len(x) == 0 || len(y) == 0 || resamples <= 0 {
		return math.NaN()
	}
	pool := make([]float64, 0, len(x)+len(y))
	pool = append(append(pool, x...), y...)
	total := 0.0
	for _, v := range pool {
		total += v
	}
	mx, _ := meanVar(x)
	my, _ := meanVar(y)
	nx, ny := float64(len(x)), float64(len(y))
	observed := math.Abs(mx - my)
	// Sums of floats are not exact: a relabelling that reproduces the observed split
	// must count, whatever the rounding.
	tol := 1e-9 * math.Max(1, observed)
	// Draw the smaller group by a partial Fisher–Yates shuffle: O(min(nx, ny)) a
	// resample. Shuffling the already shuffled pool again is still uniform.
	k, kIsX := len(x), true
	if len(y) < k {
		k, kIsX = len(y), false
	}
	r := &rng{s: seed}
	n := uint64(len(pool))
	extreme := 0
	for range resamples {
		sum := 0.0
		for i := range k {
			j := uint64(i) + r.below(n-uint64(i))
			pool[i], pool[j] = pool[j], pool[i]
			sum += pool[i]
		}
		sx, sy := sum, total-sum
		if !kIsX {
			sx, sy = total-sum, sum
		}
		if math.Abs(sx/nx-sy/ny) >= observed-tol {
			extreme++
		}
	}
	return float64(extreme+1) / float64(resamples+1)
}

// PassAtK is the unbiased pass@k estimator for one task run n times with c
// successes: 1 − C(n−c, k) / C(n, k), the chance that k runs drawn without
// replacement hold at least one success. It needs n ≥ k ≥ 1.
func PassAtK(n, c, k int) float64 {
	if k < 1 || n < k || c < 0 || c > n {
		return math.NaN()
	}
	if n-c < k {
		return 1
	}
	// C(n−c, k) / C(n, k) = ∏_{i<k} (n−c−i) / (n−i), stable for any n.
	q := 1.0
	for i := range k {
		q *= float64(n-c-i) / float64(n-i)
	}
	return 1 - q
}

// EpisodesPerArm is the number of rewarded episodes each of two equal arms needs
// for a two-sided t-test at level alpha to detect a difference of means delta with
// the given power, when the rewards have standard deviation sd: the normal
// approximation n = 2 σ² (z₁₋α/₂ + z_power)² / δ², refined with t quantiles at
// 2n − 2 degrees of freedom until it settles. It never returns fewer than 4, the
// smallest equal arms for which even the permutation test can reach p < 0.05. It
// returns 0 when delta is 0 (no sample size detects no effect) and 4 when sd is 0.
func EpisodesPerArm(delta, sd, alpha, power float64) int {
	const floor = 4
	delta = math.Abs(delta)
	switch {
	case delta == 0 || math.IsNaN(delta) || math.IsNaN(sd):
		return 0
	case sd == 0:
		return floor
	}
	ratio := sd * sd / (delta * delta)
	za, zb := NormalQuantile(1-alpha/2), NormalQuantile(power)
	n := 2 * ratio * (za + zb) * (za + zb)
	for range 50 {
		df := math.Max(2*n-2, 1)
		ta, tb := TQuantile(1-alpha/2, df), TQuantile(power, df)
		next := 2 * ratio * (ta + tb) * (ta + tb)
		if math.Abs(next-n) < 1e-6 {
			n = next
			break
		}
		n = next
	}
	if n > 1e12 {
		return math.MaxInt32
	}
	return max(int(math.Ceil(n-1e-9)), floor)
}

// z975 is the standard normal's 0.975 quantile.
const z975 = 1.959963984540054

// CI methods, as Arm.CIMethod names them.
const (
	CIWilson = "wilson" // 0/1 rewards: Wilson's score interval of the proportion
	CIT      = "t"      // Student's t-interval, clipped to the observed reward range
)

// RewardCI95 is the 95% interval of the mean of rs (nil under two rewards). When
// every reward is 0 or 1 the mean is a proportion, and a t-interval of it can leave
// [0, 1] (0.28 ± 0.8 at n = 3); Wilson's score interval cannot, and covers better at
// small n. Other rewards get the t-interval, clipped to [min, max] of rs, outside of
// which no mean of them can lie.
func RewardCI95(rs []float64) (*[2]float64, string) {
	n := float64(len(rs))
	if len(rs) < 2 {
		return nil, ""
	}
	binary, ones := true, 0.0
	lo, hi := rs[0], rs[0]
	for _, r := range rs {
		binary = binary && (r == 0 || r == 1)
		ones += r
		lo, hi = math.Min(lo, r), math.Max(hi, r)
	}
	if binary {
		p, z2 := ones/n, z975*z975
		denom := 1 + z2/n
		centre := (p + z2/(2*n)) / denom
		half := z975 * math.Sqrt(p*(1-p)/n+z2/(4*n*n)) / denom
		return &[2]float64{math.Max(0, centre-half), math.Min(1, centre+half)}, CIWilson
	}
	mean, variance := meanVar(rs)
	half := TQuantile(0.975, n-1) * math.Sqrt(variance/n)
	return &[2]float64{math.Max(lo, mean-half), math.Min(hi, mean+half)}, CIT
}
