"""Broken submissions of lab 05 (large batches), each losing exactly the test cells that check what it broke.

The tests of 5.4 put a stand-in in place of noise_scale_estimates, and no test calls warmup_lr but 5.2's (nor
scaled_lr but 5.1's), so faults in different exercises share a submission, each losing its own exercise's cells only.
"""

from tests.corpus.common import Case, chain, replace

ASSIGNMENT = "05_large_batch"

# 5.4's check of every batch before the first step, and 5.1's check of the batch sizes: one line each.
VALIDATE = "if indivisible := [len(x) for x, _ in batches if len(x) % world]:"
BATCHES = "    if base_batch < 1 or batch < 1:\n"

CASES = [
    # Three faults, one in each of exercises 5.2 to 5.4:
    # 5.2, the ramp starts at 0 and reaches the peak one step late;
    # 5.3, |g_big|^2 taken for |G|^2: biased by tr(Sigma) / b_big;
    # 5.4, one moving average of the per-step ratios instead of the ratio of two moving averages.
    Case("late_warmup_biased_g2_average_of_ratios", chain(
        replace("warmup_lr", "peak_lr * (step + 1) / warmup_steps", "peak_lr * step / warmup_steps"),
        replace("noise_scale_estimates",
                "    g2 = (b_big * big_sq_norm - b_small * small_sq_norm) / (b_big - b_small)\n",
                "    g2 = big_sq_norm  # MUTANT: the big batch's squared norm used as |G|^2\n"),
        replace("train_tracking_noise_scale",
                "        b_simple.append(ema_trace / ema_g2)\n",
                "        ema_ratio = beta * (b_simple[-1] if b_simple else 0.0)"
                " + (1 - beta) * trace / g2  # MUTANT\n"
                "        b_simple.append(ema_ratio)\n")),
         loses={"test_warmup_lr", "test_noise_scale_estimates", "test_noise_scale_unbiased", "test_noise_tracking"},
         says=("warmup_lr(t, 1.0, 4) for t = 0..5: expected [0.25, 0.5, 0.75, 1.0, 1.0, 1.0], got [0.0, 0.25",
               "(off by one?)", "noise_scale_estimates(3.0, 2.0, 2, 4): expected (1.0, 4.0), got (2.0, ",
               "is |g_big|^2 used as |G|^2?", "|G|^2 over 4000 draws of batches of 4 and 16: expected ",
               "N = 2, rank 0, the value tracked after each step: element [",
               "a moving average of the ratios tr(Sigma) / |G|^2: the tracked value is the ratio of two moving")),
    # 5.4 checks each batch when it comes to it: right results, but a bad batch is refused only after the steps
    # before it have trained the model; 5.1 accepts a batch of 0 (the linear rule then gives 0, the sqrt rule too);
    # 5.0 drops the 2 w^2 of the gradient's variance, 9 % low at eta = 0.3, B = 4: the simulation sees it.
    Case("tracking_refuses_late_and_batch_zero_accepted", chain(
        replace("train_tracking_noise_scale", VALIDATE, "if indivisible := []:  # MUTANT: not checked here"),
        replace("train_tracking_noise_scale", "        b = len(x) // world\n",
                "        if len(x) % world:  # MUTANT: checked when the batch comes\n"
                "            raise ValueError(f\"{world} ranks do not divide a batch of {len(x)} samples\")\n"
                "        b = len(x) // world\n"),
        replace("scaled_lr", BATCHES, "    if False:  # MUTANT: no check of the batch sizes\n"),
        replace("stationary_second_moment", "    a = (1 - eta) ** 2 + 2 * eta**2 / batch\n",
                "    a = (1 - eta) ** 2  # MUTANT: the gradient's variance taken as sigma^2, without its 2 w^2\n")),
         loses={"test_noise_tracking", "test_scaled_lr", "test_stationary_second_moment"},
         says=("refused, but only after training on the batches before the bad one",
               "eta=0.3, B=4, sigma=1.0: expected about 0.048", "(simulated, standard error",
               "test_scaled_lr (1 points) failed: a hidden check of exercise 5.1 failed"),
         reports=("scaled_lr(0.1, 0, 1024) and scaled_lr(0.1, 256, 0): expected a ValueError for a batch size below "
                  "1, got ['ZeroDivisionError: division by zero', 'no error']",),
         hides=("scaled_lr(0.1, 0, 1024)",)),
]
