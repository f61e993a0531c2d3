"""GPU throughput of ``nip serve`` per GPU and model size (``throughput.yaml``), which the dry
run prices self-hosted GPU time from (:mod:`nip.experiments.gpu_time`)."""
