"""The formgrader service's autograde step: it refuses to run a submission unsandboxed (grader/nbgrader_config.py)."""

from nbconvert.preprocessors import Preprocessor

REFUSAL = ("autograding in formgrader would run the submission's code unconfined, as the grader account (which can "
           "read the solutions and write the gradebook). Grade in the sandbox instead, as root on the hub's server: "
           "make hub-grade LAB=<lab> (it collects, grades and returns the feedback); formgrader then shows the grades.")


class RefuseUnsandboxed(Preprocessor):
    """Stops nbgrader's Autograde before the submission is executed, saying why and what to run."""

    def preprocess(self, nb, resources):
        raise RuntimeError(REFUSAL)
