"""The all-reduce and DDP benchmark (`make bench`, `python -m benchmark.bench`) and the reference implementations it
measures, read from the solution notebooks (reference.py). Nothing here ships to students.
"""
