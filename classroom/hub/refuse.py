"""The formgrader service refuses to autograde: a submission would run unsandboxed (grader/nbgrader_config.py).

Formgrader's Autograde button calls NbGraderAPI.autograde, which runs nbgrader's Autograde inside formgrader's
server; nbgrader has no setting that turns the button off, and its Autograde removes the earlier graded copy before
any hook or preprocessor runs. So the API method itself is replaced (refuse_autograde), and the preprocessor stops
an `nbgrader autograde` typed into the service's terminal before it executes anything.
"""

from nbconvert.preprocessors import Preprocessor

REFUSAL = ("autograding in formgrader would run the submission's code unconfined, as the grader account (which can "
           "read the solutions and write the gradebook). Grade in the sandbox instead, as root on the hub's server: "
           "make hub-grade LAB=<lab> (it collects, grades and returns the feedback); formgrader then shows the grades.")


def refuse_autograde(api, assignment_id: str, student_id: str, force: bool = True, create: bool = True) -> dict:
    """NbGraderAPI.autograde's reply, refusing: formgrader shows `error` to the instructor."""
    return {"success": False, "error": REFUSAL, "log": REFUSAL}


class RefuseUnsandboxed(Preprocessor):
    """Stops nbgrader's Autograde before the submission is executed, saying why and what to run."""

    def preprocess(self, nb, resources):
        raise RuntimeError(REFUSAL)
