"""Lab 06 (async staleness): broken submissions, each losing exactly the points of what it broke.

Points: test_delayed_gd 2, test_spectral_radius 2, test_stability_limit 2, test_parameter_server 4,
test_parameter_server_straggler 2, test_mean_staleness 2. The tests of 6.3 use no spectral_radius of the
submission's, so a bisection on it costs 6.3's points only.
"""

from tests.corpus.common import Case, chain, replace

ASSIGNMENT = "06_async_staleness"
UNREACHABLE_TAU = "cannot reach this tau"  # 6.3's hidden check: the instructor reads it, the student does not

# The server's receive (from any source: gradients applied in order of arrival), its staleness count, the
# closed-form boundary's denominator, and the delayed iterate of the simulator: one line each in the solution.
RECEIVE = "src = dist.recv(message)"
STALENESS = "tau = applied - int(message[0].item())"
BOUNDARY = "math.pi / (2 * (2 * tau + 1))"
DELAYED = "theta[max(t - tau, 0)]"
STEP = "theta -= (lr / max(1, tau) if staleness_aware else lr) * message[1:]"
LIMIT = "return 2.0 * math.sin(math.pi / (2 * (2 * tau + 1)))"
MEAN = "return (N - 1) * (1 - N / (2 * T))"
# 6.3 by a bisection on the submission's own spectral_radius: right wherever a companion matrix can be built
BISECTION = """low, high = 0.0, 2.0
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if spectral_radius(middle, tau) < 1 else (low, middle)
    return low"""

CASES = [
    # Two faults of exercise 6.4's server logic stay in two submissions; each shares its submission with faults of
    # 6.1 or 6.3, whose tests call nothing of 6.4 (nor 6.4's those of 6.1 and 6.3).
    # 6.4, the gradients applied in rank order (1, 2, 3, 1, ...) instead of in order of arrival: correct
    # bookkeeping, but the server waits for the straggler; 6.4 again, staleness_aware ignored (a constant step):
    # the visible test's staleness-aware run catches it; 6.1, the delay one step short: theta_{t - tau + 1}; 6.3, no
    # closed form but a bisection on spectral_radius, which passes up to any tau a matrix allows, not tau = 10^6.
    Case("ps_rank_order_aware_ignored_delay_one_short_and_stability_by_bisection", chain(
        replace("parameter_server", RECEIVE, "src = dist.recv(message, src=1 + applied % (world - 1))"),
        replace("parameter_server", STEP, "theta -= lr * message[1:]  # MUTANT: staleness_aware ignored"),
        replace("delayed_gd", DELAYED, "theta[max(t - tau + 1, 0)]"),
        replace("stability_limit", LIMIT, BISECTION)),
         loses={"test_parameter_server_straggler", "test_parameter_server", "test_delayed_gd",
                "test_stability_limit"},
         says=("the final theta differs from the replay of the log, element [",
               "staleness_aware=True ignored: every step was lr, not lr / max(1, staleness)",
               "of the gradients, expected under 20%: the server waits for it",
               "delayed_gd(0.5, 1, 3): expected [1, 0.5, 0, -0.25], got [",
               "(plain gradient descent's (1 - a)^t: the delay one step short",
               "test_stability_limit (2 points) failed: a hidden check of exercise 6.3 failed"),
         hides=(UNREACHABLE_TAU,), reports=(f"a search or a matrix {UNREACHABLE_TAU}; the closed form needs neither",)),
    # 6.4, the gradient's own update counted in its staleness; 6.3, tau where 2 tau + 1 belongs:
    # 2 sin(pi / (2 tau)), the asymptote's form, infinite at tau = 0.
    # And 6.4's mean staleness, its limit N - 1 for every T: the first round and the shutdown forgotten.
    Case("ps_staleness_off_by_one_stability_tau_for_2tau_plus_1_and_mean_staleness_its_limit", chain(
        replace("parameter_server", STALENESS, "tau = applied - int(message[0].item()) + 1"),
        replace("stability_limit", BOUNDARY, "math.pi / (2 * tau)"),
        replace("mean_staleness", MEAN, "return float(N - 1)  # MUTANT: the limit")),
         loses={"test_parameter_server", "test_stability_limit", "test_mean_staleness"},
         says=("expected staleness ", "(off by one?)", "ZeroDivisionError",
               "mean_staleness(2, 11): expected ", "got 1.0 (a run with budget 10, order seed 0)",
               "(the limit N - 1: the first round and the shutdown are not counted)")),
]
