"""Support library for the course notebooks: the rank launcher and small helpers shared by every lab."""
