"""nbgrader's settings of the hub's formgrader service: the course's, on the class's course root and exchange.

The service runs JupyterLab as the class's grader account with this folder first on JUPYTER_CONFIG_PATH, then
classroom/instructor/ (formgrader's server extension and plugins on), so this file has the last word.

Formgrader's Autograde button (and `nbgrader autograde` in its terminal) would run a submission's code inside this
server, as the grader account, which can read the solutions and write the gradebook: the grading sandbox needs root
(namespaces and cgroups), and a JupyterLab with a terminal must not run as root. So autograding here refuses
(refuse.py), and says what to run instead: `make hub-grade LAB=...` (classroom/hub/server.py), as root, grades
in the sandbox.
"""

import os
from pathlib import Path

from jupyter_core.paths import jupyter_data_dir

REPO = Path(__file__).resolve().parents[3]
load_subconfig(str(REPO / "autograder" / "nbgrader_config.py"))  # noqa: F821  (traitlets')

c = get_config()  # noqa: F821
c.CourseDirectory.root = os.environ["DDP_HUB_COURSE_ROOT"]
c.Exchange.root = os.environ["DDP_HUB_EXCHANGE"]
c.Exchange.cache = os.path.join(jupyter_data_dir(), "nbgrader_cache")

from nbgrader.apps.api import NbGraderAPI  # noqa: E402
from nbgrader.converters.autograde import Autograde  # noqa: E402

# The course config put the repository on sys.path.
from classroom.hub.refuse import RefuseUnsandboxed, refuse_autograde  # noqa: E402

NbGraderAPI.autograde = refuse_autograde  # formgrader's button (classroom/hub/refuse.py says why this way)
c.Autograde.sanitize_preprocessors = [RefuseUnsandboxed, *Autograde.class_traits()["sanitize_preprocessors"].default()]

# formgrader lists the released labs through the exchange, root's and closed to writing (classroom/hub/exchange.py).
c.ExchangeFactory.list = "classroom.hub.exchange.List"
