"""JupyterHub's configuration for a class (`make hub`): read by `jupyterhub -f` with the hub's state file.

`python -m classroom.hub start` writes the state (classroom/hub/server.py: the roster's users, the ports, the
folders) and starts JupyterHub with DDP_HUB_STATE pointing at it; everything below follows from it:
- login: PAM, i.e. the system users that the roster made (their generated passwords, or what they changed them to);
  only the roster's people may log in, and no one is a hub admin (an admin could open any student's server);
- each user's server: the venv's `jupyterhub-singleuser` as that user, in their home, with the course's JupyterLab
  settings and the class's tools (jupyter/class/: the Assignments tab) and the hub's nbgrader config (the shared
  exchange), bounded by cgroups (classroom/hub/spawner.py);
- formgrader: a hub service that runs JupyterLab as the class's grader account on the class's course root, reached
  only by the roster's instructors (the role below); its Autograde button refuses (grader_config.py says why);
- jupyterhub-idle-culler stops servers idle for `cull_s`;
- classroom-status: a token that `make hub-status` reads the servers with (read-only scopes).
"""

import json
import os
from pathlib import Path

c = get_config()  # noqa: F821  (traitlets puts get_config in this file's namespace)
state = json.loads(Path(os.environ["DDP_HUB_STATE"]).read_text())
private = Path(state["private"])

c.JupyterHub.bind_url = f"http://{state['ip']}:{state['port']}"
c.JupyterHub.hub_bind_url = f"http://127.0.0.1:{state['hub_port']}"
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{state['proxy_api_port']}"
c.ConfigurableHTTPProxy.command = state["proxy"]  # the npm registry's Node.js 20 running the proxy's script
c.ConfigurableHTTPProxy.pid_file = str(private / "proxy.pid")
c.JupyterHub.db_url = f"sqlite:///{private / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(private / "cookie_secret")
c.JupyterHub.pid_file = str(private / "hub.pid")
c.JupyterHub.cleanup_servers = True  # stopping the hub stops every user's server
c.JupyterHub.cleanup_proxy = True

c.JupyterHub.authenticator_class = "pam"
c.PAMAuthenticator.open_sessions = False  # no systemd-logind session per server (not every server has one)
c.Authenticator.allowed_users = set(state["students"] + state["instructors"])
c.Authenticator.admin_users = set()

c.JupyterHub.spawner_class = "classroom.hub.spawner.CourseSpawner"
c.Spawner.cmd = [str(Path(state["venv"]) / "bin" / "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"
c.Spawner.notebook_dir = "~"
c.Spawner.environment = state["user_env"]
c.Spawner.env_keep = ["LANG", "LC_ALL"]  # not the hub's PYTHONPATH (which finds the repository's classroom/)
c.Spawner.start_timeout = c.Spawner.http_timeout = 120  # a server's first start on a busy 2-core machine
c.CourseSpawner.memory_gb = state["memory_gb"]
c.CourseSpawner.cpus = state["cpus"]
c.CourseSpawner.group_prefix = state["group_prefix"]

c.JupyterHub.load_groups = {state["instructors_group"]: {"users": state["instructors"]}}
c.JupyterHub.load_roles = [
    {"name": "formgrader-access", "groups": [state["instructors_group"]],
     "scopes": ["access:services!service=formgrader"]},
    {"name": "idle-culler", "services": ["idle-culler"],
     "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"]},
    {"name": "classroom-status", "services": ["classroom-status"], "scopes": ["list:users", "read:servers"]},
]
c.JupyterHub.services = [
    {"name": "formgrader", "url": f"http://127.0.0.1:{state['formgrader_port']}", "user": state["grader"],
     "cwd": state["course_root"], "oauth_no_confirm": True,
     "command": [str(Path(state["venv"]) / "bin" / "jupyterhub-singleuser"),
                 f"--ServerApp.root_dir={state['course_root']}"],
     "environment": state["grader_env"]},
    {"name": "idle-culler", "command": [str(Path(state["venv"]) / "bin" / "python"), "-m", "jupyterhub_idle_culler",
                                        f"--timeout={state['cull_s']}"],
     # the hub's tag (server.HUB_TAG): JupyterHub passes services only what they are given, and `stop` finds it by this
     "environment": {"DDP_HUB_TAG": state["DDP_HUB_TAG"]}},
    {"name": "classroom-status", "api_token": (private / "status_token").read_text().strip()},
]
