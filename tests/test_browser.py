"""JupyterLab as a student meets it: headless Chromium, driven by playwright, clicks through the course's JupyterLab.

The server is the venv's JupyterLab with the settings that `make` put into the venv (nbgrader's student tools on,
the instructor's and a class's off, one kernel, no news pop-up), started as `make lab` starts it (that `make lab`
runs exactly this is tests/test_lab_server.py's job), on a scratch copy of course/: opening a notebook writes
checkpoints and Validate saves it, and nothing in the repository may change. Each test is one step a student takes;
a screenshot of the page after every step goes to a folder printed at the start, and the browser console must stay
free of errors throughout.

Needs a Chromium: $CHROMIUM, or `chromium` / `chromium-browser` on PATH (Debian and Ubuntu: apt-get install
chromium). Without one the module is skipped with a line that says so; `make test-browser` sets
BROWSER_TEST_REQUIRED=1, and then a missing Chromium is a failure.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest

from nbplumbing.adapter import COURSE_KERNELSPEC
from tests.common import ASSIGNMENTS, COURSE, graded_cells, meta
from tests.corpus.common import solution_notebook
from tests.test_lab_server import Lab, make_lab, serve

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
HOW_TO_ENABLE = "install Chromium (Debian/Ubuntu: apt-get install chromium) or set CHROMIUM=/path/to/chrome"
if not CHROMIUM and os.environ.get("BROWSER_TEST_REQUIRED") != "1":
    pytest.skip(f"no Chromium found, so the browser test is skipped: {HOW_TO_ENABLE}, then run `make test-browser`",
                allow_module_level=True)

pytestmark = pytest.mark.browser

LAB_00 = "00_ranks_and_alpha_beta"
PAGE_TIMEOUT_MS = 60_000  # one page action on a busy 2-core machine (a kernel starting, a widget drawing)
RUN_TIMEOUT_MS = 180_000  # running cells, or Validate running a whole notebook (COURSE_FAST: 15-30 s on 2 cores)
KERNEL = COURSE_KERNELSPEC["display_name"]
SOLVED_SUFFIX = ".solved.ipynb"  # lab 00's reference solution next to its release, for Validate
EXPLORE_SUFFIX = ".explore.ipynb"  # a lab's widgets before and after its exercises are solved (explorer_notebook)


def notebook_path(assignment: str, suffix: str = ".ipynb") -> str:
    """The path of a lab's notebook (or of a variant of it) relative to the scratch copy, as JupyterLab names it."""
    return f"{assignment}/{solution_notebook(assignment).stem}{suffix}"


def widget_cells(nb: nbformat.NotebookNode) -> list[int]:
    """The indices of the code cells that build ipywidgets controls."""
    return [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "ipywidgets" in c.source]


WIDGET_LABS = [a for a in ASSIGNMENTS if widget_cells(nbformat.read(solution_notebook(a), as_version=4))]


def explorer_notebook(assignment: str) -> nbformat.NotebookNode:
    """The lab's definitions as released, its widget cells, and then the reference solutions of its exercises.

    Run top to bottom, the widgets first meet the unsolved exercises and then, on the next move of a control, the
    solved ones: what a student sees who comes back to a widget after solving the exercises above it. Definitions
    are the nbgrader cells before the first widget that are not tests (set-up, helpers, exercises); the other cells
    (tests, experiments) would stop "Run All" at the first unsolved exercise.
    """
    released = nbformat.read(COURSE / notebook_path(assignment), as_version=4)
    solved = nbformat.read(solution_notebook(assignment), as_version=4)
    first = widget_cells(released)[0]
    definitions = [c for c in released.cells[:first] if c.cell_type == "code" and meta(c) and not meta(c)["grade"]]
    widgets = [released.cells[i] for i in widget_cells(released)]
    references = [c for c in solved.cells[: widget_cells(solved)[0]] if meta(c).get("solution")]
    explorer = nbformat.v4.new_notebook(metadata=released.metadata)
    explorer.cells = [nbformat.v4.new_code_cell(c.source) for c in definitions + widgets + references]
    return explorer


# ---- the server, the browser and the steps ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """course/ copied, plus lab 00's reference solution (for Validate) and each widget explorer."""
    root = tmp_path_factory.mktemp("browser") / "course"
    shutil.copytree(COURSE, root)
    shutil.copy(solution_notebook(LAB_00), root / notebook_path(LAB_00, SOLVED_SUFFIX))
    for assignment in WIDGET_LABS:
        nbformat.write(explorer_notebook(assignment), root / notebook_path(assignment, EXPLORE_SUFFIX))
    return root


@pytest.fixture(scope="module")
def server(scratch: Path) -> Iterator[Lab]:
    """The venv's JupyterLab on the scratch copy, as `make lab` starts it (COURSE_FAST=1 shortens Validate)."""
    def command(lab_args: str) -> list[str]:
        as_root = ["--allow-root"] if os.geteuid() == 0 else []  # as `make lab` does for root
        return [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={scratch}", *as_root,
                *shlex.split(lab_args)]

    with serve(scratch.parent, command, "JupyterLab", env={"COURSE_FAST": "1"}) as (lab, _):
        yield lab


# JupyterLab's debugger asks a new kernel for its state; when the tab closes before the reply (the test opens and
# closes every lab within seconds, on a busy machine), it logs this as an error. Nothing a student sees depends on it.
BENIGN_CONSOLE_ERRORS = ("Could not restore the debugger state: Canceled future for debug_request message",)


class Browser:
    """One JupyterLab page in headless Chromium, the browser console's errors, and a screenshot per step."""

    def __init__(self, page, shots: Path):
        self.page, self.shots, self.errors, self.warnings = page, shots, [], []
        self.reported = 0  # errors[:reported] have failed a step already
        page.set_default_timeout(PAGE_TIMEOUT_MS)
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.errors.append(f"page error: {error}"))

    def _console(self, message) -> None:
        if message.type == "error" and not message.text.startswith(BENIGN_CONSOLE_ERRORS):
            self.errors.append(f"console: {message.text}")
        elif message.type == "warning":
            self.warnings.append(message.text)

    def screenshot(self, name: str) -> None:
        self.page.screenshot(path=self.shots / f"{len(list(self.shots.iterdir())):02d}-{name}.png")

    def menu(self, *path: str) -> None:
        """Click through the menu bar, e.g. menu("Run", "Run All Cells")."""
        self.page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{path[0]}$")).click()
        for label in path[1:]:
            self.page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{re.escape(label)}$")).last.click()

    def current(self):
        """The widget in the main area's current tab (a notebook panel, the launcher...)."""
        tab = self.page.locator("#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current")
        return self.page.locator(f"[id='{tab.get_attribute('data-id')}']")

    def open(self, path: str):
        """Open a notebook with File > Open from Path; return its panel once its kernel, the course's, is idle.

        Fails if the notebook names a kernel that this venv does not offer: JupyterLab then asks which one to use,
        or, with a single kernel of the notebook's language, takes that one and says so in the console."""
        warned = len(self.warnings)
        self.menu("File", "Open from Path…")
        self.page.locator(".jp-Dialog input").fill(path)
        self.page.keyboard.press("Enter")
        title = re.compile(f"^{re.escape(path.rsplit('/', 1)[-1])}$")
        self.page.locator("#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current", has_text=title).wait_for()
        panel = self.current()
        kernel = panel.locator(".jp-Toolbar .jp-KernelName")
        deadline = time.monotonic() + PAGE_TIMEOUT_MS / 1000
        while kernel.count() == 0 or kernel.inner_text().strip() != KERNEL:
            dialogs = self.page.locator(".jp-Dialog")
            assert not dialogs.count(), f"{path}: JupyterLab asks: {dialogs.first.inner_text()!r}"
            assert time.monotonic() < deadline, f"{path} did not open on the kernel {KERNEL!r}"
            time.sleep(0.2)
        panel.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for()
        fallback = [w for w in self.warnings[warned:] if "No exact match found" in w]
        assert not fallback, f"{path} asks for a kernel this venv does not offer: {fallback}"
        return panel

    def run_all(self, panel) -> None:
        """Run > Run All Cells, and wait until the last code cell has run (none may fail: a failure stops the run)."""
        self.menu("Run", "Run All Cells")
        last = panel.locator(".jp-CodeCell").last.locator(".jp-InputPrompt", has_text=re.compile(r"\[\d+\]"))
        last.wait_for(timeout=RUN_TIMEOUT_MS)

    def modified(self) -> bool:
        """Whether the current tab shows JupyterLab's "modified" dot (closing it would ask to save)."""
        return self.page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current.jp-mod-dirty").count() > 0

    def close_tab(self) -> None:
        """Close the current tab, an unmodified one: no dialog asks to save it."""
        self.menu("File", "Close Tab")


@pytest.fixture(scope="module")
def chromium() -> str:
    """The Chromium to drive. Without one (only under `make test-browser`) the steps fail at once, saying why."""
    if not CHROMIUM:
        pytest.fail(f"no Chromium found: {HOW_TO_ENABLE}")
    return CHROMIUM


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    """The folder of the screenshots, printed at the start."""
    shots = tmp_path_factory.mktemp("browser-screenshots")
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print(f"\n  browser test: a screenshot after every step in {shots}", flush=True)
    return shots


@pytest.fixture(scope="module")
def headless(chromium: str):
    """The headless Chromium that every page of the module opens in."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium)
        try:
            yield launched
        finally:
            launched.close()


def open_lab(headless, server: Lab, shots: Path) -> Browser:
    """A new page on the server's JupyterLab, in a fresh workspace (only the launcher)."""
    page = headless.new_page(viewport={"width": 1400, "height": 900})
    page.goto(f"{server.url}/lab?reset&token={server.token}")
    return Browser(page, shots)


@pytest.fixture(scope="module")
def browser(headless, server: Lab, shots: Path) -> Browser:
    return open_lab(headless, server, shots)


@pytest.fixture(autouse=True)
def step(browser: Browser, request: pytest.FixtureRequest) -> Iterator[None]:
    """Screenshot the page after the step; fail it if the browser console logged an error since the previous step
    (the first step answers for the page's loading too)."""
    yield
    browser.screenshot(request.node.name)
    new, browser.reported = browser.errors[browser.reported:], len(browser.errors)
    assert not new, "the browser console logged errors:\n" + "\n".join(new)


# ---- the steps -------------------------------------------------------------------------------------------------


def test_the_launcher_offers_the_course_kernel_once(browser: Browser) -> None:
    for section in ("Notebook", "Console"):
        cards = browser.page.locator(".jp-Launcher-section", has=browser.page.locator(
            ".jp-Launcher-sectionTitle", has_text=re.compile(f"^{section}$"))).locator(".jp-LauncherCard")
        cards.first.wait_for()
        assert cards.all_inner_texts() == [KERNEL], f"the launcher's {section} section: {cards.all_inner_texts()}"


def test_every_lab_opens_on_the_course_kernel(browser: Browser, server: Lab) -> None:
    """No kernel picker: each notebook names the course kernel, and the venv offers no other. Each opens unmodified:
    it holds the kernel's language_info as JupyterLab saves it (nbplumbing.adapter.stamp_language_info)."""
    for assignment in ASSIGNMENTS:
        browser.open(notebook_path(assignment))
        browser.screenshot(f"opened-{assignment}")
        assert not browser.modified(), f"{assignment} opens modified: its metadata is not what JupyterLab would save"
        browser.close_tab()
        browser.page.locator(".jp-Dialog").wait_for(state="detached")
    for session in server.json("/api/sessions"):  # closing a tab leaves its kernel running
        assert server.request(f"/api/sessions/{session['id']}", "DELETE")[0] == 204


def test_lab_00_runs_until_its_first_exercise(browser: Browser) -> None:
    """Run All on the untouched lab 00: the first rank cell prints the four ranks, and the run stops at exercise
    0.1's test, whose traceback (a failed launch) shows the student's frames only, none of utils/launch.py's."""
    panel = browser.open(notebook_path(LAB_00))
    browser.menu("Run", "Run All Cells")
    failed = panel.locator(".jp-CodeCell", has_text="# Exercise 0.1:")
    failed.get_by_text("NotImplementedError: Exercise 0.1").first.wait_for(timeout=RUN_TIMEOUT_MS)
    ranks = panel.locator(".jp-CodeCell", has_text="launch(whoami, 4)").locator(".jp-OutputArea").text_content()
    for rank in range(4):
        assert f"rank {rank} of 4" in ranks, f"the first rank cell printed:\n{ranks}"
    shown = failed.locator(".jp-OutputArea").text_content()
    frames = re.findall(r"^(Cell In\[\d+\]|File .*?), line \d+", shown, re.MULTILINE)
    assert "RankFailedError" in shown and "NotImplementedError: Exercise 0.1" in shown, shown
    assert "launch.py" not in shown and frames and frames[0].startswith("Cell In["), (
        f"the first frame is not the student's, or the launcher's frames are shown:\n{shown}")


# The course's stylesheet (jupyter/custom/custom.css) on or off in the page; returns how many it found (1).
COURSE_CSS = """off => [...document.styleSheets].filter(s => s.href && s.href.endsWith('/custom/custom.css'))
    .map(s => { s.disabled = off; }).length"""


@contextlib.contextmanager
def without_course_css(page) -> Iterator[None]:
    """The page as nbgrader alone styles it (the course's stylesheet off): a check must fail there, which shows that
    it can fail and that the course's CSS is what makes it pass."""
    assert page.evaluate(COURSE_CSS, True) == 1, "the page does not link the course's custom/custom.css"
    try:
        yield
    finally:
        page.evaluate(COURSE_CSS, False)


# The box that CSS generates before the Validate button's label, whether it is a visible size, and whether it moves:
# the course's spinner while nbgrader has the button disabled.
SPINNER = """label => {
    const before = getComputedStyle(label, '::before');
    return {content: before.content, width: parseFloat(before.width) || 0, height: parseFloat(before.height) || 0,
            animation: before.animationName, playing: before.animationPlayState};
}"""


def spinning(box: dict) -> bool:
    return (box["content"] != "none" and min(box["width"], box["height"]) >= 8 and box["animation"] != "none"
            and box["playing"] == "running")


# The elements of Validate's report whose content is wider than they are, i.e. that scroll or cut it sideways, each
# with its longest line.
OVERFLOWING = """dialog => [dialog.querySelector('.jp-Dialog-body'),
                               ...dialog.querySelectorAll('#validation-message pre')]
    .filter(e => e.scrollWidth > e.clientWidth)
    .map(e => `${e.tagName}, ${e.scrollWidth} px of content in ${e.clientWidth} px: ` +
              e.innerText.split('\\n').reduce((a, b) => b.length > a.length ? b : a))"""


def validate(browser: Browser, panel, long_lines: bool = False) -> str:
    """Press Validate in the notebook's toolbar; return the text of the dialog that answers, and close it.

    While it runs, a spinner turns before the button's label; no line of the dialog is wider than the dialog.
    `long_lines`: the report holds lines that nbgrader alone would cut (checked), so the wrapping is put to work."""
    panel.locator(".jp-Toolbar").get_by_text("Validate", exact=True).click()
    # nbgrader 0.9.6 disables its <jp-button> at once, and says "Validating..." once the notebook is saved
    busy = panel.locator(".jp-Toolbar jp-button.validate-button[disabled]", has_text="Validating")
    busy.wait_for()
    browser.screenshot("validating")
    label = busy.locator(".jp-ToolbarButtonComponent-label")
    spinner = label.evaluate(SPINNER)
    with without_course_css(browser.page):
        spinner_without_css = label.evaluate(SPINNER)
    dialog = browser.page.locator(".jp-Dialog", has_text="Validation Results")
    dialog.wait_for(timeout=RUN_TIMEOUT_MS)
    browser.screenshot("validate-dialog")
    cut = dialog.evaluate(OVERFLOWING)
    with without_course_css(browser.page):
        cut_without_css = dialog.evaluate(OVERFLOWING)
    text = dialog.inner_text()
    browser.page.keyboard.press("Escape")  # closed before any check fails: the next step starts on a clear page
    dialog.wait_for(state="detached")
    assert spinning(spinner), f"while Validate runs, only the button's label shows it: the box before it is {spinner}"
    assert not spinning(spinner_without_css), "a spinner turns without the course's CSS"
    assert not cut, "lines of the Validate dialog run past its width (it scrolls sideways):\n" + "\n".join(cut)
    assert cut_without_css or not long_lines, "no line of the report is wider than the dialog without the CSS"
    return text


def test_validate_lists_every_exercise_of_an_untouched_notebook(browser: Browser) -> None:
    """Its tracebacks hold lines wider than the dialog: they wrap."""
    text = validate(browser, browser.open(notebook_path(LAB_00)), long_lines=True)
    tests = graded_cells(nbformat.read(COURSE / notebook_path(LAB_00), as_version=4)).values()
    missing = sorted(cell.source.splitlines()[0] for cell in tests if cell.source.splitlines()[0] not in text)
    assert text.count("The following cell failed") == len(tests) and not missing, (
        f"Validate does not list every test cell as failed ({missing} are missing):\n{text}")
    assert "launch.py" not in text, f"the launcher's frames are in the Validate report:\n{text}"


def test_validate_passes_a_solved_notebook(browser: Browser) -> None:
    text = validate(browser, browser.open(notebook_path(LAB_00, SOLVED_SUFFIX)))
    assert "Success! Your notebook passes all the tests." in text, text


def round_readout(text: str) -> bool:
    """An integer, or a fraction of at most two significant digits (not the 5.01 that a log slider's step makes of
    a starting value of 5)."""
    whole, _, fraction = text.strip().lstrip("-").partition(".")
    return whole.isdigit() if not fraction else len((whole + fraction).strip("0")) <= 2


@pytest.mark.parametrize("assignment", WIDGET_LABS)
def test_widgets_render_and_answer_once_the_exercises_are_solved(browser: Browser, assignment: str) -> None:
    """Each ipywidgets control renders, with a readable label and a round readout. Before the exercises are solved
    the output is one line that says what to solve (no traceback); once the reference solutions are loaded, moving
    a control draws the plot."""
    panel = browser.open(notebook_path(assignment, EXPLORE_SUFFIX))
    browser.run_all(panel)
    interacts = panel.locator(".widget-interact")
    count = len(widget_cells(explorer_notebook(assignment)))
    interacts.nth(count - 1).wait_for()
    assert "Loading widget" not in panel.text_content() and "Error displaying widget" not in panel.text_content()
    for index in range(count):
        interact = interacts.nth(index)
        interact.scroll_into_view_if_needed()
        output = interact.locator(".widget-output")
        output.get_by_text(re.compile(r"Exercise \d+\.\d+")).wait_for()
        before = output.text_content().strip()
        assert len(before.splitlines()) <= 2 and re.search(r"Exercise \d+\.\d+", before), (
            f"before the exercises are solved, widget {index} shows:\n{before}")
        wrapped = output.locator("pre").first.evaluate(  # JupyterLab breaks a line that is too long inside words
            "pre => Math.round(pre.clientHeight / parseFloat(getComputedStyle(pre).lineHeight))"
            " - pre.textContent.trim().split('\\n').length")
        assert wrapped == 0, f"widget {index}'s message wraps onto {wrapped} more line(s) than it has:\n{before}"
        assert not output.locator("[data-mime-type='application/vnd.jupyter.stderr']").count(), before
        cut = interact.locator(".widget-label").evaluate_all(
            "labels => labels.filter(l => l.scrollWidth > l.clientWidth).map(l => l.textContent)")
        assert not cut, f"labels cut off: {cut}"
        tracks = interact.locator(".slider-container").evaluate_all("cs => cs.map(c => c.clientWidth)")
        assert min(tracks) >= 200, f"slider tracks of {tracks} px: too short to set a value by dragging (lab 02: 229)"
        readouts = interact.locator(".widget-readout").all_inner_texts()
        assert all(round_readout(r) for r in readouts), f"readouts that are not round numbers: {readouts}"
        interact.locator(".noUi-handle").first.press("ArrowRight")
        output.locator("img").wait_for()
        assert output.text_content().strip() != before, "moving a control did not change the output"


def test_only_the_students_tools_are_there(browser: Browser) -> None:
    """Validate in the notebook toolbar; no Nbgrader menu (assignment list, formgrader), no Create Assignment."""
    toolbar = browser.current().locator(".jp-Toolbar")
    assert toolbar.get_by_text("Validate", exact=True).count() == 1
    menus = browser.page.locator(".lm-MenuBar-itemLabel").all_inner_texts()
    assert "Nbgrader" not in menus, f"menus: {menus}"
    sidebar = browser.page.locator(".jp-SideBar .lm-TabBar-tab").evaluate_all(
        "tabs => tabs.map(t => t.title || t.textContent)")
    assert not [t for t in sidebar if "Assignment" in t or "grader" in t.lower()], f"side bar tabs: {sidebar}"


def test_no_news_pop_up(browser: Browser) -> None:
    """JupyterLab asks about "official Jupyter news" in a toast that stays until answered; the course turns it off."""
    toasts = browser.page.locator(".jp-toast-message").all_inner_texts()
    assert not [t for t in toasts if "news" in t.lower()], f"pop-ups: {toasts}"


# ---- a class's JupyterLab: the Assignments tab ----------------------------------------------------------------


@pytest.fixture(scope="module")
def class_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """`make class-lab` (the Assignments tab on), on an exchange of its own that holds nothing yet, whatever the
    venv's exchange holds: its nbgrader_config.py goes into the user's Jupyter folder (serve() makes it in the
    temporary folder), which then comes before the venv's (in a venv, Jupyter ranks the venv's folder first unless
    JUPYTER_PREFER_ENV_PATH=0)."""
    tmp = tmp_path_factory.mktemp("class-lab")
    (tmp / "exchange").mkdir()
    (tmp / "config").mkdir()
    (tmp / "config" / "nbgrader_config.py").write_text(
        f"c.Exchange.root = {str(tmp / 'exchange')!r}\nc.Exchange.cache = {str(tmp / 'cache')!r}\n")
    with make_lab(tmp, target="class-lab", env={"JUPYTER_PREFER_ENV_PATH": "0"}) as (lab, _):
        yield lab


def test_the_assignment_list_says_what_to_expect_before_a_release(headless, class_lab: Lab, shots: Path) -> None:
    """Before the instructor releases a lab, nbgrader's tab would say "No courses found." (its course menu) and
    "There are no assignments to fetch.": the course's CSS says instead that labs appear there once released, and
    how to get one. What is read is the tab's accessible text (what is shown, the CSS's text included)."""
    assert class_lab.json("/courses") == {"success": True, "value": []}, "the class's exchange is not empty"
    student = open_lab(headless, class_lab, shots)
    try:
        student.menu("Nbgrader", "Assignment List")
        tab = student.page.locator("#assignments")
        tab.locator("#released_assignments_list_placeholder:not([hidden])").wait_for()
        assert tab.locator("#course_list_default").text_content() == "No courses found.", (
            "nbgrader's tab is not in the state before a release")
        student.screenshot("assignment-list-before-a-release")
        shown = tab.aria_snapshot()
        assert "No courses found" not in shown and "There are no assignments to fetch" not in shown, shown
        assert "No lab has been released yet." in shown and "Your instructor releases each lab here." in shown, shown
        with without_course_css(student.page):
            assert "No courses found" in tab.aria_snapshot(), "nbgrader alone does not say 'No courses found.'"
        assert not student.errors, "the browser console logged errors:\n" + "\n".join(student.errors)
    finally:
        student.page.close()
