"""What is built on the training loop: a run's price before it starts (the dry run), and tests
or iterations added to a finished run (sweeps are :mod:`nip.sweeps`)."""
