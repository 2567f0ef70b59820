"""The statistics of benchmark/report.py, each a library call: percentile-bootstrap intervals (scipy.stats.bootstrap,
each sample resampled on its own), the exact one-sided Mann-Whitney rank test (scipy.stats.mannwhitneyu over every
split of the pooled values), the Wilcoxon signed-rank test of paired differences (scipy.stats.wilcoxon), rliable's
interquartile mean with its stratified-bootstrap interval, and the sample standard deviation over seeds (ddof 1).

Each of scipy's bootstraps draws from np.random.default_rng(seed), a fixed seed, so that a rebuild from the same data
gives the same interval; scipy draws a sample's resamples as rng.integers(0, n, (reps, n)), the draws that
rng.choice(values, (reps, n)) makes, so the intervals are those of a hand-written resampling with the same seed.
rliable's is seeded too (iqm_interval)."""

import warnings

import numpy as np
from scipy import stats

CONFIDENCE = 0.95  # of every interval
REPS = 10_000  # bootstrap resamples of the intervals of the means


def sample_std(values):
    """The sample standard deviation (ddof 1: the sum of squared deviations over n - 1), the one readers assume."""
    return float(np.std(np.asarray(values, dtype=float), ddof=1))


def percentile_interval(samples, statistic, reps=REPS, seed=0):
    """The 95% percentile-bootstrap interval of statistic(*samples, axis=-1), each sample resampled with replacement on
    its own (scipy.stats.bootstrap, unpaired). A sample of one value resamples to itself: it is held as it is (scipy
    asks two or more values of each sample it resamples); with no sample of two or more the interval is the value."""
    samples = [np.asarray(sample, dtype=float) for sample in samples]
    varied = [i for i, sample in enumerate(samples) if len(sample) > 1]
    if not varied:
        value = float(statistic(*samples, axis=-1))
        return value, value

    def of_resamples(*resampled, axis=-1):
        every = list(samples)  # the samples of one value broadcast against the resamples of the others
        for i, sample in zip(varied, resampled):
            every[i] = sample
        return statistic(*every, axis=axis)

    result = stats.bootstrap(
        [samples[i] for i in varied],
        of_resamples,
        n_resamples=reps,
        confidence_level=CONFIDENCE,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    low, high = result.confidence_interval
    return float(low), float(high)


def bootstrap_interval(values, reps=REPS, seed=0):
    """The 95% percentile-bootstrap interval of the mean of `values` (seeds resampled with replacement)."""
    return percentile_interval([values], lambda v, axis: v.mean(axis=axis), reps, seed)


def difference_interval(ours, theirs, reps=REPS, seed=0):
    """The 95% percentile-bootstrap interval of mean(ours) - mean(theirs), each side's seeds resampled on its own."""
    return percentile_interval([ours, theirs], lambda a, b, axis: a.mean(axis=axis) - b.mean(axis=axis), reps, seed)


def stratified_interval(strata, reps=REPS, seed=0):
    """The 95% percentile-bootstrap interval of the mean of all the values of `strata` (a list of arrays: a task's
    runs, say), each stratum resampled with replacement within itself, so that each keeps its number of values."""
    count = sum(len(stratum) for stratum in strata)
    pooled_mean = lambda *resampled, axis: sum(stratum.sum(axis=axis) for stratum in resampled) / count  # noqa: E731
    return percentile_interval(strata, pooled_mean, reps, seed)


def rank_test(higher, lower):
    """(U, p) of the exact one-sided Mann-Whitney test that `higher` tends to exceed `lower` (scipy.stats.mannwhitneyu,
    alternative "greater"): U counts the pairs (h, l) with h > l, plus 1/2 per tie (midranks; inf ties with inf); p is
    the fraction of all C(n + m, n) splits of the pooled values into n and m whose U is at least the observed one
    (PermutationMethod with n_resamples=inf: every split, so exact with ties and inf; for seeds, a few: ten a side are
    184,756 splits). Five against five all one way: p = 1/252. With one value on a side (scipy permutes two or more a
    side) p is NaN: U alone, of n x m pairs."""
    higher, lower = np.asarray(higher, dtype=float), np.asarray(lower, dtype=float)
    exact = min(len(higher), len(lower)) >= 2
    method = stats.PermutationMethod(n_resamples=np.inf) if exact else "asymptotic"  # asymptotic: for U alone
    result = stats.mannwhitneyu(higher, lower, alternative="greater", method=method)
    return float(result.statistic), float(result.pvalue) if exact else np.nan


def signed_rank_test(differences):
    """The two-sided p of the Wilcoxon signed-rank test that paired differences centre on 0 (scipy.stats.wilcoxon;
    exact where scipy computes it exactly: few values, no ties, no zeros): five differences all of one sign give 2/32.
    NaN with fewer than two differences."""
    differences = np.asarray(differences, dtype=float)
    if len(differences) < 2:
        return np.nan
    return float(stats.wilcoxon(differences, alternative="two-sided").pvalue)


def iqm_interval(scores, reps=2000, seed=0):
    """(point, low, high): rliable's interquartile mean of a (runs x tasks) array of normalized scores and its 95%
    stratified-bootstrap interval (runs resampled within each task). ModuleNotFoundError where rliable is missing.
    rliable's StratifiedBootstrap draws its resamples from numpy's global generator (np.random.choice), not from the
    random_state it is given: that generator is seeded for the call, and put back as it was after, so that a rebuild
    from the same data gives the same interval."""
    from rliable import library as rly
    from rliable import metrics

    iqm = lambda x: np.array([metrics.aggregate_iqm(x)])  # noqa: E731
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        with warnings.catch_warnings():  # arch, under rliable, calls random_state deprecated; it still takes it
            warnings.simplefilter("ignore", FutureWarning)
            random_state = np.random.RandomState(seed)
            point, interval = rly.get_interval_estimates({"x": scores}, iqm, reps=reps, random_state=random_state)
    finally:
        np.random.set_state(state)
    low, high = interval["x"][:, 0]
    return float(point["x"][0]), float(low), float(high)
