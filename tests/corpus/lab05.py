"""Broken submissions of lab 05 (large batches), each losing exactly the test cells that check what it broke."""

from tests.corpus.common import Case, replace

ASSIGNMENT = "05_large_batch"

CASES = [
    # |g_big|^2 taken for |G|^2: biased by tr(Sigma) / b_big.
    Case("biased_g2", replace("noise_scale_estimates",
                              "    g2 = (b_big * big_sq_norm - b_small * small_sq_norm) / (b_big - b_small)\n",
                              "    g2 = big_sq_norm  # MUTANT: the big batch's squared norm used as |G|^2\n"),
         loses={"test_noise_scale_estimates", "test_noise_scale_unbiased"}),
    # The ramp starts at 0 and reaches the peak one step late.
    Case("warmup_off_by_one", replace("warmup_lr", "peak_lr * (step + 1) / warmup_steps",
                                      "peak_lr * step / warmup_steps"),
         loses={"test_warmup_lr"}),
    # One moving average of the per-step ratios instead of the ratio of two moving averages.
    Case("average_of_ratios", replace("train_tracking_noise_scale",
                                      "        b_simple.append(ema_trace / ema_g2)\n",
                                      "        ema_ratio = beta * (b_simple[-1] if b_simple else 0.0)"
                                      " + (1 - beta) * trace / g2  # MUTANT\n"
                                      "        b_simple.append(ema_ratio)\n"),
         loses={"test_noise_tracking"}),
]
