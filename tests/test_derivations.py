"""Derivations graded as derivations: what a student must derive is printed nowhere in the student edition.

Each entry names a graded function whose answer is derived (README, "Derivation exercises"), the ways its result would
be written, and its values at three points of its hidden tests. The student edition must hold none of them: the
release of its lab (every cell, markdown and code, except the exercise's own test cell, which the student is meant
to read), the student README, the edition's template files and utils/. Each entry must also describe its answer, so
that the scan could fail: the solution region computes one of the forms, and the exercise's hidden tests state each
value.

Forms are compared after `normal`: no whitespace, no LaTeX backslashes, braces or dollar signs, lower case. So
`$K^* = \\sqrt{C/\\alpha}$`, `\\sqrt{C / \\alpha}` and `sqrt(C / alpha)` all contain `sqrtc/alpha` or
`sqrt(c/alpha)`. Values are compared as numbers rounded to 3 significant figures, `f"{value:.3g}"`: every number of a
text counts, written as 407350296576, 407,350,296,576, 4.07e11, 4.07 \\times 10^{11} or 10^{11}.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from classroom.export import student_readme
from nbplumbing.cells import meta
from tests.common import ROOT, lab_marker, lab_params, notebook
from tests.corpus.common import HIDDEN, SOLUTION, cells, solution_notebook


@dataclass(frozen=True)
class Derivation:
    """A derived result: the solution cell that computes it, the ways it could be printed, its values at scale."""

    assignment: str  # e.g. "01_collectives"
    grade_id: str  # the solution cell
    forms: tuple[str, ...]  # written as `normal` leaves them
    values: tuple[str, ...] = ()  # values at three hidden-test points, as printed to 3 significant figures


DERIVATIONS: list[Derivation] = [
    # 0.4: the size at which a message gets a share s of 1/beta, s / (1 - s) * alpha / beta, and the pattern of the
    # table it fills (9 n_1/2 at 90%, 99 n_1/2 at 99%).
    Derivation("00_ranks_and_alpha_beta", "size_for_share", (
        "share/(1-share)", "s/(1-s)", "fracs1-s", "fracshare1-share", "1/(1-share)-1", "1/(1-s)-1", "9n_1/2",
        "99n_1/2", "ninetimes", "ninety-nine")),
    # 1.8: the fewest bytes of all ranks together, N - 1 pieces for a rooted collective, N (N - 1) for AllGather and
    # ReduceScatter (2 N (N - 1) for AllReduce is section 5's bound 3, given); values at (all_gather, 9973, 4096),
    # (scatter, 10^4, 123456789) and (reduce_scatter, 7919, 999999937).
    Derivation("01_collectives", "minimum_traffic", (
        "n*(n-1)", "n(n-1)", "n*(n-1)*piece_bytes", "n*(n-1)*m", "n(n-1)m", "(n-1)*piece_bytes",
        "(int(n)-1)*piece_bytes", "n(n-1)pieces", "n*(n-1)pieces"),
        ("4.07e+11", "1.23e+12", "6.27e+16")),
    # 1.9: the fewest messages, N - 1 for a rooted collective and 2 (N - 1) for the three whose every result depends
    # on every rank (section 5's bound 3 counts 2 (N - 1) messages for one position of an all-reduce: the step left to
    # the student is that one message may carry every position, and that AllGather and ReduceScatter need as many);
    # values at (all_reduce, 9973), (gather, 7919) and (reduce_scatter, 7333).
    Derivation("01_collectives", "minimum_messages", (
        "2*(int(n)-1)", "2n-2", "2*n-2", "2*(n-1)messages", "2(n-1)messagesintotal", "2(n-1)messagesinall"),
        ("1.99e+04", "7.92e+03", "1.47e+04")),
    # 2.4: the crossover M* = (alpha / beta) N (N - 1 - L) / (N L - N + 1), the equation it solves gathered,
    # (N - 1 - L) alpha / beta = (L - (N - 1) / N) M*, and its large-N form with the numerator kept exact.
    Derivation("02_ring_allreduce", "crossover_size", (
        "n-1-l", "(n-1-l)/(n*l-n+1)", "n*l-n+1", "nl-n+1", "l-fracn-1n", "l-(n-1)/n", "fracn-1-ll-fracn-1n",
        "fracn-1-log_2nlog_2n-1", "(p-1-math.log2(p))")),
    # 3.0: c = h_SGD + h_DP = 2k + B + max b_r + N - 1, with h_SGD = k + B - 1 and h_DP = k + (max b_r - 1) + 2 +
    # (N - 1); values at ([314159] * 9973, 700), ([987654321, 271828, 0], 12) and ([65537] * 4096 + [1], 3).
    Derivation("03_data_parallel_math", "rounding_constant", (
        "k+b-1", "k_chain+b-1", "chain+sum(shard_sizes)-1", "sum(shard_sizes)-1", "max(shard_sizes)-1",
        "len(shard_sizes)-1", "2k+2b", "h_sgd=k+", "h_dp=k+", "2k+b+b_max", "2k+b+b_max+n-1", "b_max+n-1",
        "2*chain+sum(shard_sizes)", "max(shard_sizes)+len(shard_sizes)", "2*k_chain+",
        "rounding_constant([b],k_chain)-2"),
        ("3.13e+09", "1.98e+09", "2.69e+08")),
    # 4.1: the step time of K equal buckets, T(K) = max(C / K + K alpha + beta' M, C + alpha + beta' M / K), and its
    # best integer K, in its two regimes: the K of equal terms, (C - beta' M) / alpha, with its condition, and the
    # communication-bound term's own minimum, sqrt(C / alpha), with T = beta' M + 2 sqrt(alpha C). Its values at three
    # hidden points: K* = 5518 (C = 0.37 s), T(K*) = 0.652 s (K* = 179), K* = 1085106.
    Derivation("04_bucketed_ddp", "best_bucket_count", (
        "fracc-beta'malpha", "(c-beta'm)/alpha", "(c-beta*m)/alpha", "d/alpha", "fracdalpha",
        "sqrtc/alpha", "sqrt(c/alpha)", "(c/alpha)**0.5", "(c/alpha)**(1/2)",
        "sqrtalphac", "sqrt(alpha*c)", "(alpha*c)**0.5", "fracalphacc-beta'm", "alpha*c/d",
        "c/k+kalpha", "c/k+k*alpha", "fracck+kalpha", "c+alpha+beta'm/k", "c+alpha+fracbeta'mk", "c+alpha+beta*m/k",
        "(k-1)/k", "frack-1k", "r_k+(k-k+1)c", "r_k+(k-k+1)*c", "bothtermsequal", "twoterms", "(c-bandwidth)/alpha",
        "c_sweep-beta*m_sweep", "(alpha*c_sweep)**0.5", "c_model-beta*m_model", "ownminimum", "oneofequalterms"),
        ("5.52e+03", "0.652", "1.09e+06")),
    # 5.0: v_inf = eta sigma^2 / (B (2 - eta - 2 eta / B)), from v' = (1 - eta)^2 v + eta^2 (2 v + sigma^2) / B, stable
    # for eta < 2B / (B + 2).
    Derivation("05_large_batch", "stationary_second_moment", (
        "(1-eta)^2", "(1-eta)**2", "2-eta-2eta/b", "2-eta-2*eta/b", "fracetasigma^2b(2-eta", "eta/(b*(2-eta",
        "2eta^2/b", "2*eta**2/b", "2v_t+sigma^2", "2b/(b+2)", "frac2bb+2")),
    # 6.4: the mean staleness of a run, (N - 1)(1 - N / 2T), and the fixed total N (N - 1) / 2 it comes from.
    Derivation("06_async_staleness", "mean_staleness", (
        "1-n/2t", "1-n/(2t)", "1-fracn2t", "n/(2*t)", "fracn2t", "1-n/(2*len", "2*len(staleness)-n",
        "n(n-1)/2", "fracn(n-1)2", "n*(n-1)/2")),
    # 7.1: the bytes per rank of stages 1, 2 and 3, (p + g) Psi + K Psi / N, p Psi + (g + K) Psi / N and
    # (p + g + K) Psi / N, their mixed-precision values 4 Psi + 12 Psi / N, 2 Psi + 14 Psi / N and 16 Psi / N, and
    # section 6's table of the same counts with n_r owned elements. Its values at three hidden points: 1.28e+11 bytes
    # (Psi = 3.1e10, N = 96, stage 1), 8.78e+10 (4.3e10, 384, stage 2, 2 + 4 + 12), 1.17e+09 (7.3e10, 1000, stage 3).
    Derivation("07_zero", "memory_per_rank", (
        "(p+g)psi+kpsi/n", "ppsi+(g+k)psi/n", "(p+g)*psi+k*psi/n", "p*psi+(g+k)*psi/n", "4psi+12psi/n",
        "2psi+14psi/n", "4*psi+12*psi/n", "2*psi+14*psi/n", "tendto4psiand2psi", "16psi/n", "frac16psin",
        "16*psi/n", "(p+g+k)psi/n", "12psi/n", "14psi/n", "4n_rmore", "2n_rmore", "12*owned",
        "dividesallofitbyn", "(param_bytes+grad_bytes)*", "optimizer_bytes/world_size"),
        ("1.28e+11", "8.78e+10", "1.17e+09")),
    # 8.1-8.3, one cell: the peak bytes per rank, k Psi / N + (1 + p) U c (+ 2 U g in backward: the unit's gradient
    # and autograd's new one while it is added in); one step's bytes,
    # (N - 1) s_u (2c + r) per unit, 3 (N - 1) / N of the parameters' bytes for r = c; and the prefetch batch,
    # b* = F (N - 1)(alpha + P c / (N B)) / (2 P).
    Derivation("08_fsdp", "fsdp_costs", (
        "(1+prefetch)*unit_params", "(prefetch+1)*unit_params", "(1+p)u", "(p+1)u", "(2+p)u", "u*(c+g)",
        "2*unit_params*grad_bytes", "2ug", "2*u*g", "u*(c+2g)", "u(c+2g)",
        "(2*compute_bytes+reduce_bytes)", "(2c+r)", "2*c+r", "3(n-1)s", "3*(n-1)*s", "frac3(n-1)n", "3*(n-1)/n",
        "gather*flops_per_second/(2*unit_params)", "(n-1)(alpha+pc/(nb))f/(2p)", "fracf(n-1)(alpha+",
        "(n-1)cf/(2nb)", "frac(n-1)cf2nb", "(world_size-1)*compute_bytes*flops_per_second")),
]

# A number as a text may write it: digits (with thousands separators), a decimal part, and a power of ten written as
# e11, "times 10^11", "cdot 10^{11}", "* 10**11", or 10^11 alone. The lookbehind keeps the digits of names (fc1) out.
NUMBER = re.compile(r"""(?<![\w.])(?P<mantissa>\d{1,3}(?:[,_]\d{3})+(?!\d)|\d+(?:_\d+)*)(?P<fraction>\.\d+)?
    (?:e(?P<e>[+-]?\d+)
      |\s*(?:times|cdot|\*|×)\s*10\s*(?:\^|\*\*)\s*\(?(?P<times>[+-]?\d+)
      |(?<=10)(?:\^|\*\*)\s*\(?(?P<power>[+-]?\d+))?""", re.VERBOSE)


def normal(text: str) -> str:
    """The text without whitespace, LaTeX backslashes, braces and dollar signs, in lower case."""
    return re.sub(r"[\s\\{}$]", "", text).lower()


def three_figures(text: str) -> set[str]:
    """Every number in `text`, as f"{value:.3g}" writes it.

    >>> sorted(three_figures("407350296576 bytes, 4.07 \\\\times 10^{11}; 10^{11}; 1,234,444,433,211 and fc1 of 7,919"))
    ['1.23e+12', '1e+11', '4.07e+11', '7.92e+03']
    """
    found = set()
    for m in NUMBER.finditer(re.sub(r"[\\{}$]", "", text).lower()):
        if m["power"] is not None:
            value = 10.0 ** int(m["power"])
        else:
            exponent = int(m["e"] or m["times"] or 0)
            value = float(re.sub(r"[,_]", "", m["mantissa"]) + (m["fraction"] or "")) * 10.0 ** exponent
        found.add(f"{value:.3g}")
    return found


def grading_cell(nb: dict, grade_id: str) -> str:
    """The grade_id of the test cell that grades the solution cell `grade_id`: the first test cell after it."""
    ids = [meta(c).get("grade_id") for c in nb["cells"]]
    after = nb["cells"][ids.index(grade_id) + 1:]
    return next(meta(c)["grade_id"] for c in after if meta(c).get("grade") and not meta(c).get("solution"))


def release_cells(derivation: Derivation) -> dict[str, str]:
    """The student's release of the derivation's lab, by cell (grade_id, else the cell id), less its own test cell."""
    nb = notebook(ROOT / "course" / derivation.assignment / solution_notebook(derivation.assignment).name)
    own_test = grading_cell(nb, derivation.grade_id)
    return {meta(c).get("grade_id") or c.get("id", str(i)): "".join(c["source"]) for i, c in enumerate(nb["cells"])
            if meta(c).get("grade_id") != own_test}


def student_files() -> dict[str, str]:
    """The student edition's texts beyond the releases: its README, the template's files and utils/."""
    files = {"README.md (student edition)": student_readme((ROOT / "README.md").read_text())}
    paths = sorted((ROOT / "classroom" / "template").iterdir()) + sorted((ROOT / "utils").glob("*.py"))
    return files | {str(p.relative_to(ROOT)): p.read_text() for p in paths if p.is_file()}


def printed(derivation: Derivation, texts: dict[str, str]) -> list[str]:
    """Where the texts print one of the derivation's forms or values: 'where: what' for each."""
    found = []
    for where, text in texts.items():
        found += [f"{where}: {form!r}" for form in derivation.forms if form in normal(text)]
        found += [f"{where}: the value {value}" for value in sorted(set(derivation.values) & three_figures(text))]
    return found


def derivation_params() -> list:
    return [pytest.param(d, marks=getattr(pytest.mark, lab_marker(d.assignment)), id=f"{d.assignment}/{d.grade_id}")
            for d in DERIVATIONS]


@pytest.mark.parametrize("derivation", derivation_params())
def test_no_derived_result_is_printed_in_the_release(derivation: Derivation) -> None:
    found = printed(derivation, release_cells(derivation))
    assert not found, (f"course/{derivation.assignment} prints what {derivation.grade_id} must derive, outside its "
                       f"test cell: {found} (move it out of the release, into the solution region or an instructor "
                       "cell)")


@pytest.mark.parametrize("derivation", derivation_params())
def test_no_derived_result_is_printed_in_the_student_edition(derivation: Derivation) -> None:
    found = printed(derivation, student_files())
    assert not found, f"the student edition prints what {derivation.grade_id} must derive: {found}"


@pytest.mark.parametrize("derivation", derivation_params())
def test_the_forms_describe_the_solution(derivation: Derivation) -> None:
    """The solution region of the graded cell computes one of the forms: the scan above is not vacuous."""
    cell = cells(notebook(solution_notebook(derivation.assignment)))[derivation.grade_id]
    solution = normal("".join(m[0] for m in SOLUTION.finditer("".join(cell["source"]))))
    assert any(form in solution for form in derivation.forms), (
        f"none of the forms listed for {derivation.grade_id} occurs in its solution: {derivation.forms}")


# 4.1's and 7.1's hidden tests compute their three points' values from the arguments instead of writing them out.
VALUES_COMPUTED_IN_HIDDEN_TESTS = {"best_bucket_count", "memory_per_rank"}


@pytest.mark.parametrize("derivation", [p for p in derivation_params() if p.values[0].values])
def test_the_values_are_the_hidden_tests(derivation: Derivation) -> None:
    """Three values, each one that the exercise's hidden tests assert, written there as a number."""
    if derivation.grade_id in VALUES_COMPUTED_IN_HIDDEN_TESTS:
        pytest.skip(f"{derivation.grade_id}'s hidden tests compute these values from their arguments (the release "
                    "scan still looks for them); to do: state them there as numbers")
    nb = notebook(solution_notebook(derivation.assignment))
    test = "".join(cells(nb)[grading_cell(nb, derivation.grade_id)]["source"])
    hidden = three_figures("".join(m[0] for m in HIDDEN.finditer(test)))
    assert len(set(derivation.values)) == 3, f"{derivation.grade_id}: {derivation.values} are not three values"
    missing = [value for value in derivation.values if value not in hidden]
    assert not missing, f"{derivation.grade_id}: the hidden tests of its test cell state no value {missing}"


@pytest.mark.parametrize("assignment", lab_params(sorted({d.assignment for d in DERIVATIONS})))
def test_instructor_cells_leave_the_release(assignment: str) -> None:
    """A cell tagged "instructor" in solutions/ (a derivation's argument, its exact checks) is not in course/."""
    tagged = [cell for cell in notebook(solution_notebook(assignment))["cells"]
              if "instructor" in cell["metadata"].get("tags", [])]
    release = notebook(ROOT / "course" / assignment / solution_notebook(assignment).name)
    sources = {"".join(cell["source"]) for cell in release["cells"]}
    left = [cell["id"] for cell in tagged if "".join(cell["source"]) in sources]
    assert not left, f"course/{assignment} keeps the instructor-only cells {left}: run `make release`"
