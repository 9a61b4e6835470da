"""nbgrader's settings in every user's server on the hub: the class's course and its shared exchange.

The hub's spawner puts this folder first on JUPYTER_CONFIG_PATH (before jupyter/class/, which turns the Assignments
tab on) and sets the two variables; a `nbgrader fetch_assignment` in a JupyterLab terminal reads the same.
The exchange is root's, closed to writing but for inbound/ (classroom/hub/exchange.py): its steps for a student,
loaded from that file (the servers do not import the repository's packages), check only what they need of it.
"""

import importlib.util
import os
from pathlib import Path

from jupyter_core.paths import jupyter_data_dir

spec = importlib.util.spec_from_file_location("classroom_hub_exchange", Path(__file__).parents[1] / "exchange.py")
exchange = importlib.util.module_from_spec(spec)
spec.loader.exec_module(exchange)

c = get_config()  # noqa: F821  (traitlets')
c.CourseDirectory.course_id = os.environ["DDP_HUB_COURSE"]
c.Exchange.root = os.environ["DDP_HUB_EXCHANGE"]
# The venv's own nbgrader_config.py (make's one-machine exchange) puts the cache into the venv: each user's is theirs.
c.Exchange.cache = os.path.join(jupyter_data_dir(), "nbgrader_cache")
for step, steps_class in exchange.STUDENT_STEPS.items():
    c.ExchangeFactory[step] = steps_class
