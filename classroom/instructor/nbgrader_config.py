"""The instructor's JupyterLab (`make instructor-lab`): formgrader and the toolbar use the course's nbgrader config.

`make instructor-lab` puts this folder on JUPYTER_CONFIG_PATH: Jupyter reads its jupyter_server_config.json (the
instructor's server extensions on) and labconfig/page_config.json (the instructor's JupyterLab plugins on), and
nbgrader's server extensions read this file, which loads autograder/nbgrader_config.py: the same course root,
folders and gradebook as `make autograde`.
"""

from pathlib import Path

load_subconfig(str(Path(__file__).resolve().parents[2] / "autograder" / "nbgrader_config.py"))  # noqa: F821  (traitlets')
