"""nbgrader's settings in every user's server on the hub: the class's course and its shared exchange.

The hub's spawner puts this folder first on JUPYTER_CONFIG_PATH (before jupyter/class/, which turns the Assignments
tab on) and sets the two variables; a `nbgrader fetch_assignment` in a JupyterLab terminal reads the same.
"""

import os

from jupyter_core.paths import jupyter_data_dir

c = get_config()  # noqa: F821  (traitlets')
c.CourseDirectory.course_id = os.environ["DDP_HUB_COURSE"]
c.Exchange.root = os.environ["DDP_HUB_EXCHANGE"]
# The venv's own nbgrader_config.py (make's one-machine exchange) puts the cache into the venv: each user's is theirs.
c.Exchange.cache = os.path.join(jupyter_data_dir(), "nbgrader_cache")
