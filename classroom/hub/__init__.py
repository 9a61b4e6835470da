"""The class on one server: JupyterHub with one system user per person of the roster (`make hub`).

server.py starts, stops and reports on the hub and runs the instructor's steps on it; roster.py reads the roster and
makes and removes the users; jupyterhub_config.py is JupyterHub's configuration; spawner.py and limits.py bound each
server; student/ and grader/ hold the nbgrader settings of the users' servers and of the formgrader service;
proxy/ pins configurable-http-proxy (npm); measure.py measures how many students' launches a core serves.
"""
