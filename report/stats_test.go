package report

import (
	"math"
	"testing"
)

func near(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.IsNaN(got) || math.Abs(got-want) > tol {
		t.Errorf("%s = %.12g, want %.12g ± %g", what, got, want, tol)
	}
}

// TestTQuantileTable checks the quantile against a printed t table (three
// decimals), and against values computed independently to 15 digits (mpmath's
// betainc with 30-digit arithmetic and a root finder).
func TestTQuantileTable(t *testing.T) {
	table := []struct{ p, df, want float64 }{
		{0.975, 10, 2.228},
		{0.975, 30, 2.042},
		{0.975, 1, 12.706},
		{0.975, 2, 4.303},
		{0.975, 5, 2.571},
		{0.995, 5, 4.032},
		{0.95, 20, 1.725},
		{0.9, 3, 1.638},
	}
	for _, c := range table {
		near(t, "TQuantile table", TQuantile(c.p, c.df), c.want, 0.0005)
	}
	precise := []struct{ p, df, want float64 }{
		{0.975, 10, 2.22813885198627},
		{0.975, 30, 2.04227245630124},
		{0.975, 39, 2.02269092003676},
		{0.975, 1, 12.7062047361747},
		{0.975, 2.5, 3.57465484200368}, // fractional df, as Welch–Satterthwaite gives
		{0.995, 5, 4.03214298355523},
	}
	for _, c := range precise {
		near(t, "TQuantile", TQuantile(c.p, c.df), c.want, 1e-9)
	}
	// Symmetry, the median, and the normal limit.
	near(t, "TQuantile(0.025, 10)", TQuantile(0.025, 10), -2.22813885198627, 1e-9)
	near(t, "TQuantile(0.5, 7)", TQuantile(0.5, 7), 0, 0)
	near(t, "TQuantile(0.975, 1e6)", TQuantile(0.975, 1e6), 1.959966, 1e-5)
	near(t, "NormalQuantile(0.975)", NormalQuantile(0.975), 1.959963984540054, 1e-12)
	for _, bad := range []float64{0, 1, -0.1, math.NaN()} {
		if !math.IsNaN(TQuantile(bad, 5)) {
			t.Errorf("TQuantile(%v, 5) should be NaN", bad)
		}
	}
}

func TestTCDF(t *testing.T) {
	cases := []struct{ t, df, want float64 }{
		{1, 1, 0.75},                      // Cauchy: 1/2 + atan(1)/π
		{2, 5, 0.949030260585071},         // mpmath
		{-1.5, 12.3, 0.0794194233827555},  // mpmath, fractional df
		{3, 100, 0.998296042328335},       // mpmath
		{0, 4, 0.5},                       //
		{2.228138851986, 10, 0.975},       // the table value, round trip
		{math.Inf(1), 3, 1},               //
		{math.Inf(-1), 3, 0},              //
		{-2.0422724563012, 30, 0.0250000}, // lower tail
	}
	for _, c := range cases {
		near(t, "TCDF", TCDF(c.t, c.df), c.want, 1e-10)
	}
	// Cauchy (df 1) in closed form over a range: 1/2 + atan(t)/π.
	for x := -20.0; x <= 20; x += 0.37 {
		near(t, "TCDF Cauchy", TCDF(x, 1), 0.5+math.Atan(x)/math.Pi, 1e-12)
	}
	// df 2 in closed form: 1/2 + t / (2√(2 + t²)).
	for x := -20.0; x <= 20; x += 0.41 {
		near(t, "TCDF df=2", TCDF(x, 2), 0.5+x/(2*math.Sqrt(2+x*x)), 1e-12)
	}
	near(t, "TTwoSided tiny", TTwoSided(40, 60), 2*(1-TCDF(40, 60)), 1e-15)
	if p := TTwoSided(40, 60); p <= 0 || p > 1e-30 {
		t.Errorf("TTwoSided(40, 60) = %g: small p-values must keep their precision", p)
	}
}

func TestRegIncBeta(t *testing.T) {
	// I_x(1, 1) = x; I_x(a, 1) = x^a; I_x(1, b) = 1 − (1−x)^b; symmetry.
	for _, x := range []float64{0.01, 0.2, 0.5, 0.77, 0.99} {
		near(t, "I_x(1,1)", RegIncBeta(x, 1, 1), x, 1e-14)
		near(t, "I_x(3.5,1)", RegIncBeta(x, 3.5, 1), math.Pow(x, 3.5), 1e-13)
		near(t, "I_x(1,4)", RegIncBeta(x, 1, 4), 1-math.Pow(1-x, 4), 1e-13)
		near(t, "symmetry", RegIncBeta(x, 2.5, 7), 1-RegIncBeta(1-x, 7, 2.5), 1e-13)
	}
}

// TestWelchTest uses the two worked examples of the Wikipedia article "Welch's
// t-test" (t = −2.46, ν = 24.99, p = 0.021; t = −1.57, ν = 9.90, p = 0.149), with
// more digits from an independent 30-digit computation (mpmath).
func TestWelchTest(t *testing.T) {
	a1 := []float64{27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7, 21.4}
	a2 := []float64{27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9, 20.5, 24.4}
	w := WelchTest(a1, a2)
	near(t, "example 1 t", w.T, -2.45535639829, 1e-9)
	near(t, "example 1 df", w.DF, 24.9885292902, 1e-8)
	near(t, "example 1 p", w.P, 0.0213780014629, 1e-10)

	b1 := []float64{17.2, 20.9, 22.6, 18.1, 21.7, 21.4, 23.5, 24.2, 14.7, 21.8}
	b2 := []float64{21.5, 22.8, 21.0, 23.0, 21.6, 23.6, 22.5, 20.7, 23.4, 21.8, 20.7, 21.7, 21.5, 22.5, 23.6, 21.5, 22.5, 23.5, 21.5, 21.8}
	w = WelchTest(b1, b2)
	near(t, "example 2 t", w.T, -1.5654335236, 1e-9)
	near(t, "example 2 df", w.DF, 9.90474124865, 1e-8)
	near(t, "example 2 p", w.P, 0.148841696605, 1e-10)

	// Swapping the samples flips t only.
	w2 := WelchTest(b2, b1)
	near(t, "swapped t", w2.T, 1.5654335236, 1e-9)
	near(t, "swapped p", w2.P, w.P, 1e-15)

	// Constant samples: no variance, so the means either differ for sure or not at all.
	if w := WelchTest([]float64{1, 1, 1}, []float64{0, 0}); w.P != 0 || !math.IsInf(w.T, 1) {
		t.Errorf("constant different samples: %+v", w)
	}
	if w := WelchTest([]float64{1, 1}, []float64{1, 1, 1}); w.P != 1 || w.T != 0 {
		t.Errorf("constant equal samples: %+v", w)
	}
	if w := WelchTest([]float64{1}, []float64{1, 2}); !math.IsNaN(w.P) {
		t.Errorf("one value: %+v", w)
	}
}

// mcTol is how far a Monte Carlo p-value from Resamples draws may stray from the
// exact p: five standard errors of a binomial proportion, so that the check fails
// for a wrong test and (practically) never for an unlucky seed.
func mcTol(p float64) float64 { return 5*math.Sqrt(p*(1-p)/Resamples) + 2.0/Resamples }

// TestPermutationTest compares the Monte Carlo p-value with exact permutation
// p-values counted by hand.
func TestPermutationTest(t *testing.T) {
	// {1,2,3} vs {4,5,6}: of the C(6,3) = 20 splits, only the observed one and its
	// mirror reach |diff| = 3, so p = 2/20 = 0.1.
	near(t, "p {1,2,3}/{4,5,6}", PermutationTest([]float64{1, 2, 3}, []float64{4, 5, 6}, Resamples, PermutationSeed), 0.1, mcTol(0.1))
	// {0,0,1} vs {1,1,1,1}: pool of two 0s and five 1s; a split of 3 and 4 is fixed by
	// how many 0s land in the first group: 2 zeros (C(2,2)·C(5,1) = 5 splits, diff
	// 1/3 − 1 = −2/3), 1 zero (2·10 = 20, diff 2/3 − 3/4 = −1/12), 0 zeros (10 splits,
	// diff 1 − 2/4 = +1/2). |diff| ≥ 2/3 only for the first: p = 5/35 = 1/7.
	near(t, "p {0,0,1}/{1,1,1,1}", PermutationTest([]float64{0, 0, 1}, []float64{1, 1, 1, 1}, Resamples, PermutationSeed), 1.0/7, mcTol(1.0/7))
	// Identical groups: every split is at least as extreme: p = 1.
	if p := PermutationTest([]float64{2, 2}, []float64{2, 2, 2}, Resamples, PermutationSeed); p != 1 {
		t.Errorf("identical groups p = %v", p)
	}
	// Deterministic: the same seed gives the same p, a different one (almost surely)
	// another; the order of the arguments does not change the test.
	x, y := []float64{0.1, 0.5, 0.9, 0.3}, []float64{0.6, 0.7, 0.2, 0.95, 0.8}
	p1 := PermutationTest(x, y, Resamples, PermutationSeed)
	if p2 := PermutationTest(x, y, Resamples, PermutationSeed); p1 != p2 {
		t.Errorf("same seed: %v then %v", p1, p2)
	}
	if p3 := PermutationTest(y, x, Resamples, PermutationSeed); math.Abs(p3-p1) > 0.02 {
		t.Errorf("swapped groups: %v vs %v", p3, p1)
	}
	// The smallest p a permutation test can report is 1/(resamples+1), never 0.
	big0, big1 := make([]float64, 40), make([]float64, 40)
	for i := range big1 {
		big1[i] = 1
	}
	if p := PermutationTest(big0, big1, Resamples, PermutationSeed); p != 1.0/(Resamples+1) {
		t.Errorf("extreme split p = %v, want 1/%d", p, Resamples+1)
	}
}

func TestRNGBelow(t *testing.T) {
	// The generator is fixed forever: these are splitmix64's first outputs for seed 0
	// (the reference values of Vigna's splitmix64.c).
	r := &rng{}
	for _, want := range []uint64{0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f} {
		if got := r.next(); got != want {
			t.Fatalf("splitmix64 = %#x, want %#x", got, want)
		}
	}
	counts := make([]int, 3)
	for range 30000 {
		counts[r.below(3)]++
	}
	for i, c := range counts {
		if c < 9500 || c > 10500 {
			t.Errorf("below(3) gave %d %d times of 30000", i, c)
		}
	}
}

func TestPassAtK(t *testing.T) {
	cases := []struct {
		n, c, k int
		want    float64
	}{
		{4, 0, 1, 0},
		{4, 1, 1, 0.25},
		{4, 1, 2, 0.5},           // 1 − C(3,2)/C(4,2) = 1 − 3/6
		{4, 2, 2, 5.0 / 6},       // 1 − C(2,2)/C(4,2) = 1 − 1/6
		{4, 1, 3, 0.75},          // 1 − C(3,3)/C(4,3) = 1 − 1/4
		{4, 3, 2, 1},             // n − c < k
		{10, 3, 5, 1 - 21.0/252}, // 1 − C(7,5)/C(10,5)
		{200, 1, 100, 0.5},       // 1 − C(199,100)/C(200,100) = 1 − 100/200
	}
	for _, c := range cases {
		near(t, "PassAtK", PassAtK(c.n, c.c, c.k), c.want, 1e-12)
	}
	if !math.IsNaN(PassAtK(2, 1, 3)) {
		t.Error("k > n should be NaN")
	}
}

// TestEpisodesPerArm checks the sample size against G*Power's published two-sample
// t-test sizes (two-tailed, alpha 0.05, power 0.8): effect size d = 0.8 → 26, d = 0.5
// → 64, d = 0.4 → 100 per group.
func TestEpisodesPerArm(t *testing.T) {
	for _, c := range []struct {
		delta, sd float64
		want      int
	}{
		{0.8, 1, 26},
		{0.5, 1, 64},
		{0.2, 0.5, 100},
		{-0.2, 0.5, 100}, // the sign does not matter
		{0.3, 0, 4},      // no variance: the floor
		{0, 0.5, 0},      // no effect: no size detects it
	} {
		if got := EpisodesPerArm(c.delta, c.sd, Alpha, Power); got != c.want {
			t.Errorf("EpisodesPerArm(%v, %v) = %d, want %d", c.delta, c.sd, got, c.want)
		}
	}
}

func TestFormatP(t *testing.T) {
	for p, want := range map[float64]string{
		0.003: "= 0.003", 0.0066: "= 0.0066", 0.02: "= 0.02", 0.31: "= 0.31", 0.0213: "= 0.021",
		0.0009: "< 0.001", 0.999: "= 1", 1: "= 1", 0.1: "= 0.1",
	} {
		if got := FormatP(p); got != want {
			t.Errorf("FormatP(%v) = %q, want %q", p, got, want)
		}
	}
}

// TestLiftCI: the interval is dual to Welch's test (its ends are where the
// two-sided p-value is 0.05), it excludes 0 exactly when p < 0.05, and the edge
// cases hold.
func TestLiftCI(t *testing.T) {
	cases := []struct{ x, y []float64 }{
		{[]float64{1, 1, 1, 0, 1, 0, 1, 1}, []float64{0, 1, 0, 0, 1, 0}},
		{[]float64{0.2, 0.4, 0.9, 0.7}, []float64{0.1, 0.3, 0.2}},
		{[]float64{1, 0, 1, 0, 1, 0, 1, 0, 1, 1, 1, 1}, []float64{0, 0, 0, 0, 0, 0, 0, 0, 1}},
		{[]float64{0, 1}, []float64{1, 0}},
	}
	for i, c := range cases {
		mx, _ := meanVar(c.x)
		my, _ := meanVar(c.y)
		lift := mx - my
		ci := liftCI(lift, c.x, c.y)
		w := WelchTest(c.x, c.y)
		if ci == nil || math.Abs((ci[0]+ci[1])/2-lift) > 1e-12 {
			t.Fatalf("case %d: interval %v not centred on the lift %g", i, ci, lift)
		}
		se := lift / w.T
		if lift == 0 {
			se = (ci[1] - ci[0]) / 2 / TQuantile(0.975, w.DF)
		}
		if p := TTwoSided((ci[1]-lift)/se, w.DF); math.Abs(p-0.05) > 1e-6 {
			t.Fatalf("case %d: p at the interval's end = %g, want 0.05", i, p)
		}
		if excludes := ci[0] > 0 || ci[1] < 0; excludes != (w.P < 0.05) {
			t.Fatalf("case %d: interval %v but p = %g", i, ci, w.P)
		}
	}
	if ci := liftCI(1, []float64{1, 1}, []float64{0, 0}); ci == nil || *ci != [2]float64{1, 1} {
		t.Fatalf("no variance: %v, want [1, 1]", ci)
	}
	if liftCI(0.5, []float64{1}, []float64{0, 1}) != nil {
		t.Fatal("an interval from one reward")
	}
}

func TestRewardCI95(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rs     []float64
		lo, hi float64
		method string
	}{
		// 1 of 3: t gives 0.333 ± 1.434, far outside [0, 1]; Wilson (z = 1.96) does not.
		{"binary", []float64{1, 0, 0}, 0.061492, 0.792340, CIWilson},
		{"all zero", []float64{0, 0, 0, 0}, 0, 0.489891, CIWilson},
		// mean 0.7, sd 0.43589, t(0.975, 2) = 4.302653 → 0.7 ± 1.0828, clipped to [0.2, 1].
		{"graded, clipped", []float64{0.9, 1, 0.2}, 0.2, 1, CIT},
		{"graded, inside", []float64{0.4, 0.5, 0.6, 0.5, 0.4, 0.6}, 0.406136, 0.593864, CIT},
	} {
		ci, method := RewardCI95(tc.rs)
		if ci == nil || method != tc.method || math.Abs(ci[0]-tc.lo) > 5e-6 || math.Abs(ci[1]-tc.hi) > 5e-6 {
			t.Errorf("%s: %v %q, want [%v, %v] %q", tc.name, ci, method, tc.lo, tc.hi, tc.method)
		}
	}
	if ci, _ := RewardCI95([]float64{1}); ci != nil {
		t.Errorf("one reward has an interval %v", ci)
	}
}
