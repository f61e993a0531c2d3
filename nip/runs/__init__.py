"""A run's folder and the records in it: its directory, state, plan steps and control files."""
