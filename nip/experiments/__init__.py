"""What is built on the training loop: a run's price before it starts (the dry run), grids of
runs (sweeps, locally or on Ray), and tests or iterations added to a finished run."""
