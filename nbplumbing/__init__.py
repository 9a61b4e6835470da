"""The plumbing that grading (autograder/) and the class's logistics (classroom/) both stand on; it imports neither.

    adapter.py     the course's nbgrader: its config, folders and release, the one way to run an nbgrader command,
                   the scores of a gradebook
    cells.py       a notebook's cells read: nbgrader's metadata, the source, the syntax tree (also benchmark/'s)
    processes.py   every process of a run, found by its tag and stopped
    cgroup.py      one cgroup: a memory, process and CPU bound, and the means to end every process in it
                   (the grading sandbox's, and the hub's per-student limits)
"""
